package builder_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/pkg/store"
)

// replica is one builder replica: its own mesh connection, Redis client
// and builder (with what it keeps in memory between steps), run and
// stopped at will.
type replica struct {
	t     *testing.T
	m     *mesh.Mesh
	r     mesh.Runner
	trips store.RoundTrips
	stop  func()
}

func newReplica(t *testing.T, cfg config.Config) *replica {
	t.Helper()
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	r, err := m.Service("builder")
	if err != nil {
		t.Fatal(err)
	}
	rep := &replica{t: t, m: m, r: r}
	m.Store.Client().AddHook(&rep.trips)
	return rep
}

// run starts the replica's builder; stop waits for it to drain.
func (rep *replica) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rep.r.Run(ctx) }()
	rep.stop = func() {
		cancel()
		if err := <-done; err != nil {
			rep.t.Errorf("builder: %v", err)
		}
	}
}

// analyzed publishes what the stuck detector would after step: nothing
// stuck, go on.
func analyzed(t *testing.T, m *mesh.Mesh, session, task string, step int) {
	t.Helper()
	env := events.Must(events.IterationAnalyzed, session, task, step, time.Now(), events.IterationAnalyzedData{Iteration: step})
	if err := m.Bus.Publish(context.Background(), env); err != nil {
		t.Fatal(err)
	}
}

// completed waits for the iteration.completed of step and returns its
// record.
func completed(t *testing.T, m *mesh.Mesh, session string, step int) events.IterationRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rec events.IterationRecord
	err := m.Bus.Follow(ctx, session, func(env events.Envelope) (bool, error) {
		if env.Type == events.IterationCompleted && env.Step == step {
			return true, env.Decode(&rec)
		}
		if env.Type.Terminal() {
			return false, fmt.Errorf("session ended with %s: %s", env.Type, env.Data)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("step %d did not complete: %v", step, err)
	}
	return rec
}

// Two builder replicas taking turns on one session never act on what
// they remember of it once the other has moved it on: replica A steps,
// replica B steps, and A's next step starts from B's (the iteration after
// B's, with B's turn in the context the model is given).
func TestReplicasTakingTurnsSeeEachOthersSteps(t *testing.T) {
	script, err := scriptllm.ParseScript([]byte(`
rules:
  - name: first
    model: builder
    when: {turn: 1}
    reply: {content: "first step, by A", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "a"}}]}
  - name: second
    model: builder
    when: {turn: 2, any_contains: "first step, by A"}
    reply: {content: "second step, by B", tool_calls: [{name: write_file, arguments: {path: b.txt, content: "b"}}]}
  - name: third
    model: builder
    when: {turn: 3, any_contains: "second step, by B"}
    reply: {content: "third step, by A, after B's"}
`), ".yaml")
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
	cfg.LLM.BaseURL, cfg.Builder.Model = url, "builder"
	// A replica stopped with a pull request open leaves what it was sent
	// for redelivery after AckWait.
	cfg.Stream.AckWait = 2 * time.Second
	a, b := newReplica(t, cfg), newReplica(t, cfg)
	p, err := prd.Parse([]byte("tasks:\n  - {id: R1, title: r, acceptance_criteria: [x]}\n"), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	const session = "replicas"

	a.run()
	if err := a.m.Bus.Publish(context.Background(), events.Must(events.SessionStarted, session, "", 0, time.Now(),
		events.SessionStartedData{PRD: p, Workspace: t.TempDir()})); err != nil {
		t.Fatal(err)
	}
	if rec := completed(t, a.m, session, 1); rec.AssistantText != "first step, by A" {
		t.Fatalf("step 1: %q", rec.AssistantText)
	}
	a.stop()

	b.run()
	analyzed(t, b.m, session, "R1", 1)
	if rec := completed(t, b.m, session, 2); rec.AssistantText != "second step, by B" || rec.Iteration != 2 {
		t.Fatalf("step 2: iteration %d, %q", rec.Iteration, rec.AssistantText)
	}
	b.stop()

	a.run()
	defer a.stop()
	analyzed(t, a.m, session, "R1", 2)
	rec := completed(t, a.m, session, 3)
	if rec.AssistantText != "third step, by A, after B's" || rec.Iteration != 3 {
		t.Fatalf("step 3 by A: iteration %d, %q; want the third iteration, with B's step in its context", rec.Iteration, rec.AssistantText)
	}
	if n := srv.Hits("third"); n != 1 {
		t.Fatalf("the third rule was hit %d times", n)
	}
}

// A step costs the builder at most four Redis round trips, pipelined:
// the analysis of the step before applied (one commit), then the peek at
// the versions and the journal, the model's reply journaled with its
// usage, and the step's commit; a call of a tool that writes adds its
// journal entry, a read adds nothing. The model's usage is not a round
// trip of its own.
func TestAStepCostsTheBuilderFourRoundTrips(t *testing.T) {
	script, err := scriptllm.ParseScript([]byte(`
rules:
  - {model: builder, when: {turn: 1}, reply: {content: "one", tool_calls: [{name: write_file, arguments: {path: a.txt, content: "a"}}]}}
  - {model: builder, when: {turn: 2}, reply: {content: "two", tool_calls: [{name: write_file, arguments: {path: b.txt, content: "b"}}]}}
  - {model: builder, when: {turn: 3}, reply: {content: "three", tool_calls: [{name: read_file, arguments: {path: a.txt}}]}}
  - {model: builder, when: {turn: 4}, reply: {content: "four"}}
`), ".yaml")
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
	cfg.LLM.BaseURL, cfg.Builder.Model = url, "builder"
	rep := newReplica(t, cfg)
	rep.run()
	defer rep.stop()
	p, err := prd.Parse([]byte("tasks:\n  - {id: C1, title: c, acceptance_criteria: [x]}\n"), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	const session = "round-trips"
	if err := rep.m.Bus.Publish(context.Background(), events.Must(events.SessionStarted, session, "", 0, time.Now(),
		events.SessionStartedData{PRD: p, Workspace: t.TempDir()})); err != nil {
		t.Fatal(err)
	}
	completed(t, rep.m, session, 1)
	for _, c := range []struct{ step, want int64 }{{2, 4 + 1}, {3, 4}, {4, 4}} {
		step, want := int(c.step), c.want
		before := rep.trips.Count()
		analyzed(t, rep.m, session, "C1", step-1)
		rec := completed(t, rep.m, session, step)
		if got := rep.trips.Count() - before; got != want {
			t.Errorf("step %d with %d tool calls took %d Redis round trips, want %d", step, len(rec.ToolCalls), got, want)
		}
	}
	usage, err := rep.m.Store.Usage(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	if usage["builder:calls"] != 4 || usage["builder:input"] == 0 {
		t.Errorf("usage %v, want the builder's 4 calls counted", usage)
	}
}
