package summarizer

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

// A compaction.requested is acted on only when its session is compacting
// that task at that step: one for a session without state, for another
// step or for another task is acked (no error) and leaves the context and
// the journal alone.
func TestCompactionRequestNotAwaitedIsIgnored(t *testing.T) {
	ctx := context.Background()
	st := servicetest.Store(t)
	view := store.SessionView{Session: "s1", Workspace: "/w", Phase: store.PhaseCompacting, Step: 5,
		Tasks: []store.TaskView{{Task: prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}}, Status: "active"}}}
	if _, err := st.SaveState(ctx, "s1", 0, view); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendUnits(ctx, "s1", "T1", units.Unit{ID: "u1", Role: "user", Kind: units.KindMessage, Content: "x", Tokens: 1}); err != nil {
		t.Fatal(err)
	}
	b := &servicetest.RecordingBus{}
	svc := New(Deps{Bus: b, Store: st, Log: zap.NewNop()})
	for _, c := range []struct {
		name, session, envTask, task string
		step                         int
	}{
		{"no such session", "ghost", "T1", "T1", 5},
		{"another step", "s1", "T1", "T1", 4},
		{"another task in the payload", "s1", "T1", "T9", 5},
	} {
		env := events.Must(events.CompactionRequested, c.session, c.envTask, c.step, time.Now(),
			events.CompactionRequestedData{TaskID: c.task, ContextTokens: 900, LimitTokens: 1000, Iteration: 3})
		if err := svc.onRequested(ctx, env); err != nil {
			t.Errorf("%s: %v, want the event acked", c.name, err)
		}
		var rec events.CompactionCompletedData
		if found, err := st.JournalGet(ctx, c.session, c.step, journalField, &rec); err != nil || found {
			t.Errorf("%s: journaled a compaction (%v)", c.name, err)
		}
	}
	if len(b.Published()) != 0 {
		t.Errorf("published %v for requests nobody awaited", b.Published())
	}
	if _, ver, err := st.Context(ctx, "s1", "T1"); err != nil || ver != 1 {
		t.Errorf("context at version %d (%v), want it untouched at 1", ver, err)
	}
}
