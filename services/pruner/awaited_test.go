package pruner

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/servicetest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/units"
)

// A prune.requested is acted on only when its session is pruning that task
// at that step: one for a session without state, for another step or for
// another task is acked (no error) and leaves the context alone.
func TestPruneRequestNotAwaitedIsIgnored(t *testing.T) {
	ctx := context.Background()
	st := servicetest.Store(t)
	task := prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}}
	view := store.SessionView{Session: "s1", Workspace: "/w", Phase: store.PhasePruning, Step: 2,
		Tasks: []store.TaskView{{Task: task, Status: "active"}, {Task: prd.Task{ID: "T2", Title: "u", AcceptanceCriteria: []string{"c"}}}}}
	if _, err := st.SaveState(ctx, "s1", 0, view); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"T1", "T2"} {
		if err := st.AppendUnits(ctx, "s1", scope, units.Unit{ID: "u1", Role: "user", Kind: units.KindMessage, Content: "x", Tokens: 1}); err != nil {
			t.Fatal(err)
		}
	}
	b := &servicetest.RecordingBus{}
	svc := New(Deps{Bus: b, Store: st, Log: zap.NewNop()})
	sig := events.Signal{Pattern: "p", Confidence: 1, Action: events.ActionPrune}
	for _, c := range []struct {
		name, session, task string
		step                int
	}{
		{"no such session", "ghost", "T1", 2},
		{"another step", "s1", "T1", 3},
		{"another task", "s1", "T2", 2},
	} {
		env := events.Must(events.PruneRequested, c.session, c.task, c.step, time.Now(), events.PruneRequestedData{TaskID: c.task, Signal: sig})
		if err := svc.onRequested(ctx, env); err != nil {
			t.Errorf("%s: %v, want the event acked", c.name, err)
		}
	}
	if len(b.Published()) != 0 {
		t.Errorf("published %v for requests nobody awaited", b.Published())
	}
	for _, scope := range []string{"T1", "T2"} {
		if _, ver, err := st.Context(ctx, "s1", scope); err != nil || ver != 1 {
			t.Errorf("context %s at version %d (%v), want it untouched at 1", scope, ver, err)
		}
	}
}
