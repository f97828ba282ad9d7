package mesh_test

import (
	"reflect"
	"testing"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

// The settings `ralph config` shows default to what the packages default
// to: a default changed in one place only would make the documented value
// a lie.
func TestConfigDefaultsMatchThePackages(t *testing.T) {
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
	if got, want := mesh.StuckConfig(cfg), stuckdetector.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("stuck detector config from the default configuration:\n got %+v\nwant %+v", got, want)
	}
}
