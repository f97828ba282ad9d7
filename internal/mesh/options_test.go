package mesh_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/critic"
	"github.com/ralphmesh/ralph/services/decomposer"
	"github.com/ralphmesh/ralph/services/pruner"
	"github.com/ralphmesh/ralph/services/stuckdetector"
	"github.com/ralphmesh/ralph/services/summarizer"
)

// The settings `ralph config` shows are the packages' own Configs, so their
// defaults are the packages' defaults: nothing restates them.
func TestConfigDefaultsAreThePackages(t *testing.T) {
	cfg, err := config.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	got, err := mesh.CompactionOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := compaction.DefaultOptions()
	want.Model = cfg.Summarizer.Model
	if !reflect.DeepEqual(got, want) {
		t.Errorf("compaction options from the default configuration:\n got %+v\nwant %+v", got, want)
	}
	for name, pair := range map[string][2]any{
		"stuck":      {mesh.StuckConfig(cfg), stuckdetector.DefaultConfig()},
		"builder":    {cfg.Builder.Config, builder.DefaultConfig()},
		"critic":     {cfg.Critic.Config, critic.DefaultConfig()},
		"pruner":     {cfg.Pruner.Config, pruner.DefaultConfig()},
		"decomposer": {cfg.Decomposer.Config, decomposer.DefaultConfig()},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("%s: from the configuration %+v, the package's default %+v", name, pair[0], pair[1])
		}
	}
	sum := summarizer.DefaultConfig()
	if cfg.Compaction.MaxSummaryTokens != sum.MaxSummaryTokens || cfg.Compaction.CacheTTL != sum.CacheTTL || cfg.Compaction.Advisor != sum.Advisor {
		t.Errorf("summarizer: from the configuration %+v, the package's default %+v", cfg.Compaction, sum)
	}
}

// With compaction off the builder never asks; the summarizer still gets a
// mode the planner plans in.
func TestCompactionOffPlansInTheDefaultMode(t *testing.T) {
	cfg, _ := config.Defaults()
	cfg.Compaction.Mode = compaction.ModeOff
	o, err := mesh.CompactionOptions(cfg)
	if err != nil || o.Mode != compaction.ModeTieredAdaptive || cfg.CompactAt() != 0 {
		t.Fatalf("options %+v, err %v, compact at %d", o, err, cfg.CompactAt())
	}
}

// Options.Ready hears of each service once its consumers are consuming:
// what `ralph service` waits for before it logs "running".
func TestReadyOncePerServiceAfterItsConsumers(t *testing.T) {
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL = "http://127.0.0.1:1/v1" // never called
	ready := make(chan string, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := mesh.Start(ctx, cfg, zap.NewNop(), mesh.Options{Ready: func(s string) { ready <- s }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.RunServices(runCtx, critic.Name, stuckdetector.Name) }()
	var got []string
	for len(got) < 2 {
		select {
		case s := <-ready:
			got = append(got, s)
		case err := <-done:
			t.Fatalf("services stopped: %v", err)
		case <-ctx.Done():
			t.Fatalf("ready heard of %v only", got)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{critic.Name, stuckdetector.Name}) {
		t.Fatalf("ready for %v", got)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
