package stuckdetector

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/servicetest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/store"
)

// Only the iteration a session waits to have analysed enters the stuck
// window: a record for a session without state, or for another step or
// task of a real one, is acked and ignored, so forged records cannot make
// the detector fire; the awaited one is analysed.
func TestIterationNotAwaitedIsIgnored(t *testing.T) {
	ctx := context.Background()
	st := servicetest.Store(t)
	view := store.SessionView{Session: "s1", Workspace: "/w", Phase: store.PhaseAnalyzing, Step: 7,
		Tasks: []store.TaskView{{Task: prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}}, Status: "active"}}}
	if _, err := st.SaveState(ctx, "s1", 0, view); err != nil {
		t.Fatal(err)
	}
	b := &servicetest.RecordingBus{}
	svc := New(Deps{Bus: b, Store: st, Log: zap.NewNop()})
	for _, c := range []struct {
		name, session, task string
		step                int
	}{
		{"no such session", "ghost", "T1", 7},
		{"another step", "s1", "T1", 6},
		{"another task", "s1", "T2", 7},
	} {
		env := events.Must(events.IterationCompleted, c.session, c.task, c.step, time.Now(), events.IterationRecord{Iteration: 7, TaskID: c.task})
		if err := svc.onIteration(ctx, env); err != nil {
			t.Errorf("%s: %v, want the event acked", c.name, err)
		}
	}
	if len(b.Published()) != 0 {
		t.Fatalf("published %v for iterations nobody awaited", b.Published())
	}
	window, err := st.AppendWindow(ctx, "s1", "T1", events.IterationRecord{Iteration: 7, TaskID: "T1"}, 8)
	if err != nil || len(window) != 1 {
		t.Errorf("window %v (%v), want only the record added here", window, err)
	}

	awaited := events.Must(events.IterationCompleted, "s1", "T1", 7, time.Now(), events.IterationRecord{Iteration: 7, TaskID: "T1"})
	if err := svc.onIteration(ctx, awaited); err != nil {
		t.Fatal(err)
	}
	if len(b.Published()) != 1 || b.Published()[0].Type != events.IterationAnalyzed {
		t.Errorf("published %v, want iteration.analyzed for the awaited iteration", b.Published())
	}
}
