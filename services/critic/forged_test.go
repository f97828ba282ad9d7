package critic_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/critic"
)

// sessionAt is a builder state for one task with the given verify command,
// as the builder saves it: iterating at step 1 or, when review is set,
// reviewing the task's first claimed completion at step 1.
func sessionAt(t *testing.T, session, workspace, verify string, review bool) builder.State {
	t.Helper()
	p := prd.PRD{Tasks: []prd.Task{{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}, Verify: verify}}}
	now := time.Now()
	st, _ := builder.Start(session, events.SessionStartedData{PRD: p, Workspace: workspace}, builder.DefaultConfig().Limits(), now)
	if !review {
		return st
	}
	st, _, err := builder.Next(st, builder.IterationDone{Step: 1, Record: events.IterationRecord{Iteration: 1, TaskID: "T1", ClaimedDone: true}}, now)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err = builder.Next(st, builder.Analyzed{Step: 1, Data: events.IterationAnalyzedData{Iteration: 1, ClaimedDone: true}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != builder.PhaseReviewing || st.Step != 1 {
		t.Fatalf("state is %s at step %d, want reviewing at 1", st.Phase, st.Step)
	}
	return st
}

// forged is a critique.requested as any NATS client could publish it, with
// a verify command of its choosing.
func forged(session string, step int, workspace, verify string) events.Envelope {
	return events.Must(events.CritiqueRequested, session, "T1", step, time.Now(), events.CritiqueRequestedData{
		Task:      prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"c"}, Verify: verify},
		Workspace: workspace, Attempt: 1,
	})
}

// A critique.requested names the verify command to run, but the critic
// takes it only from the session's stored state: a forged request for a
// session that does not exist, or for a real one that is not in review,
// runs nothing, is acked, and leaves a warning naming the session; one for
// a real review runs the stored command, not the forged one.
func TestForgedCritiqueRequestRunsNothing(t *testing.T) {
	script, err := scriptllm.ParseScript([]byte("rules:\n  - {reply: {content: '{\"approved\": true}'}}\n"), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(script)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL = url
	core, logs := observer.New(zapcore.InfoLevel)
	m, err := mesh.Start(context.Background(), cfg, zap.New(core), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, critic.Name) }()
	t.Cleanup(func() { cancel(); <-done })

	ws := t.TempDir()
	touch := func(name string) string { return "touch " + filepath.Join(ws, name) }
	idle := sessionAt(t, "idle", ws, touch("stored-idle"), false)
	if _, err := m.Store.SaveState(ctx, "idle", 0, idle); err != nil {
		t.Fatal(err)
	}
	review := sessionAt(t, "review", ws, touch("stored-review")+"; exit 1", true)
	if _, err := m.Store.SaveState(ctx, "review", 0, review); err != nil {
		t.Fatal(err)
	}

	for _, env := range []events.Envelope{
		forged("ghost", 1, ws, touch("ghost")),
		forged("idle", 1, ws, touch("idle")),
		forged("review", 1, ws, touch("review")),
	} {
		if err := m.Bus.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	waitAcked(ctx, t, m, 3)

	for _, name := range []string{"ghost", "idle", "review", "stored-idle"} {
		if _, err := os.Stat(filepath.Join(ws, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("marker %s exists (%v): a command ran that the session's state did not ask for", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "stored-review")); err != nil {
		t.Errorf("the stored verify command of the session in review did not run: %v", err)
	}
	for _, session := range []string{"ghost", "idle"} {
		warned := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("ignoring critique.requested").
			FilterField(zap.String("session", session)).Len()
		if warned != 1 {
			t.Errorf("%d warnings for the forged request of session %s, want 1", warned, session)
		}
	}

	// The only verdict is the real review's, on the stored command.
	var verdicts []events.CritiqueCompletedData
	if err := m.Bus.Replay(ctx, "review", func(env events.Envelope) error {
		if env.Type == events.CritiqueCompleted {
			d, err := events.DecodeAs[events.CritiqueCompletedData](env)
			verdicts = append(verdicts, d)
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(verdicts) != 1 || verdicts[0].Verify == nil || !strings.Contains(verdicts[0].Verify.Command, "stored-review") || verdicts[0].Verdict.Approved {
		t.Errorf("verdicts %+v, want one rejection on the stored verify command", verdicts)
	}
	for _, session := range []string{"ghost", "idle"} {
		if ok, err := m.Bus.SessionExists(ctx, session); err != nil {
			t.Fatal(err)
		} else if ok {
			var types []events.Type
			_ = m.Bus.Replay(ctx, session, func(env events.Envelope) error { types = append(types, env.Type); return nil })
			if len(types) != 1 {
				t.Errorf("session %s has events %v, want only the forged request", session, types)
			}
		}
	}
}

// waitAcked waits until the critic's consumer has acked n events.
func waitAcked(ctx context.Context, t *testing.T, m *mesh.Mesh, n uint64) {
	t.Helper()
	for {
		cons, err := m.Bus.JetStream().Consumer(ctx, events.StreamName(m.Config.Prefix), bus.ConsumerName(critic.Name))
		if err == nil {
			info, err := cons.Info(ctx)
			if err == nil && info.AckFloor.Consumer >= n && info.NumAckPending == 0 && info.NumPending == 0 {
				if info.NumRedelivered != 0 {
					t.Errorf("%d events were redelivered, want every one acked at once", info.NumRedelivered)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the critic did not ack %d events: %v", n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
