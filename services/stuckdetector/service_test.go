package stuckdetector_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/store"
)

// The service keeps the window in Redis across iterations as the pure
// Detector keeps it in memory: weak evidence stays for the next iteration
// to add to, strong evidence is cleared once it has fired. Iterations go
// one at a time, as the builder sends them (the next only after the
// previous one was analyzed).
func TestServiceKeepsWeakEvidenceAndClearsStrong(t *testing.T) {
	cfg := meshconfig.New(t)
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, "stuckdetector") }()
	t.Cleanup(func() { cancel(); <-done })

	const session = "stuck-window"
	var got []*events.Signal
	// The detector analyses only the iteration the session waits to have
	// analysed: play the builder's part by saving that state each time.
	view := store.SessionView{Session: session, Workspace: "/w", Phase: store.PhaseAnalyzing,
		Tasks: []store.TaskView{{Task: prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}}, Status: "active"}}}
	var version int64
	for it := 1; it <= 5; it++ {
		view.Step = it
		if version, err = m.Store.SaveState(ctx, session, version, view); err != nil {
			t.Fatal(err)
		}
		rec := events.IterationRecord{
			Iteration: it, TaskID: "T1", AssistantText: "Reading the loader.", WorkspaceHash: "sha256:9f2c",
			ToolCalls: []events.ToolCall{{Name: "read_file", Args: json.RawMessage(`{"path":"config.go"}`), Output: "package config\n"}},
		}
		if err := m.Bus.Publish(ctx, events.Must(events.IterationCompleted, session, "T1", it, time.Now(), rec)); err != nil {
			t.Fatal(err)
		}
		var analyzed events.IterationAnalyzedData
		if err := m.Bus.Follow(ctx, session, func(env events.Envelope) (bool, error) {
			if env.Type != events.IterationAnalyzed {
				return false, nil
			}
			var d events.IterationAnalyzedData
			if err := env.Decode(&d); err != nil {
				return false, err
			}
			if d.Iteration != it {
				return false, nil
			}
			analyzed = d
			return true, nil
		}); err != nil {
			t.Fatalf("iteration %d was not analyzed: %v", it, err)
		}
		got = append(got, analyzed.Signal)
	}

	want := []struct {
		strength events.Strength
		action   events.Action
	}{
		{}, {},
		{events.StrengthWeak, events.ActionNudge},
		// Kept after the weak signal: the fourth read makes it strong.
		{events.StrengthStrong, events.ActionPrune},
		// Cleared after the strong one: one read is no loop.
		{},
	}
	for i, w := range want {
		s := got[i]
		switch {
		case w.strength == "" && s != nil:
			t.Errorf("iteration %d: signal %+v, want none", i+1, s)
		case w.strength != "" && (s == nil || s.Strength != w.strength || s.Action != w.action):
			t.Errorf("iteration %d: signal %+v, want %s evidence and %s", i+1, s, w.strength, w.action)
		}
	}
}
