package mesh_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/critic"
)

// doneAtOnce is a builder that says it is done at its first step, and an
// approving critic.
const doneAtOnce = `
rules:
  - {model: builder, reply: {content: "Nothing to do; done."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`

const oneTask = "tasks:\n  - {id: T1, title: one, acceptance_criteria: [x]}\n"

// last is the session's terminal event, decoded.
func last[T any](t *testing.T, got []events.Envelope, typ events.Type) T {
	t.Helper()
	end := got[len(got)-1]
	var d T
	if end.Type != typ || end.Decode(&d) != nil {
		t.Fatalf("session ended with %s %s, want %s; events %v", end.Type, end.Data, typ, types(got))
	}
	return d
}

// stateOf is the builder's stored state of session.
func stateOf(t *testing.T, m *mesh.Mesh, session string) builder.State {
	t.Helper()
	var st builder.State
	if _, err := m.Store.LoadState(context.Background(), session, &st); err != nil {
		t.Fatalf("state of %s: %v", session, err)
	}
	return st
}

// runService runs handlers as service on m until the test ends.
func runService(t *testing.T, m *mesh.Mesh, service string, handlers map[events.Type]bus.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Bus.Run(ctx, service, handlers, bus.RunOptions{AckWait: time.Second}) }()
	t.Cleanup(func() { cancel(); <-done })
}

// A stage that gives up on an event (here the critic panics, so its
// request is dead-lettered) ends the session instead of leaving it waiting:
// the builder's supervisor escalates it with who gave up on what and why,
// and a person can resume it.
func TestDeadLetterOfAStageEscalatesTheSession(t *testing.T) {
	h := newHarness(t, parseScript(t, doneAtOnce))
	m := h.mesh()
	h.run(m, "builder", "stuckdetector")
	runService(t, m, critic.Name, map[events.Type]bus.Handler{
		events.CritiqueRequested: func(context.Context, events.Envelope) error { panic("critic bug") },
	})
	h.start(m, "dlq-critic", parsePRD(t, oneTask), workspace(t, nil))
	got := h.wait(m, "dlq-critic")
	d := last[events.SessionEscalatedData](t, got, events.SessionEscalated)
	if want := "critic gave up on critique.requested at step 1 after 1 delivery: handler panicked: critic bug"; d.Reason != want || d.TaskID != "T1" {
		t.Fatalf("escalation %+v, want the reason %q", d, want)
	}
	if st := stateOf(t, m, "dlq-critic"); st.Phase != builder.PhaseEscalated {
		t.Fatalf("state is %s", st.Phase)
	}
	if _, active, err := m.Store.LastActive(context.Background(), "dlq-critic"); err != nil || active {
		t.Fatalf("an escalated session is still watched (%v, %v)", active, err)
	}
}

// One of the builder's own inputs given up on (an analysis it cannot
// read) fails the session with the reason.
func TestDeadLetterOfTheBuildersInputFailsTheSession(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, reply: {content: "Working.", tool_calls: [{name: list_dir, arguments: {path: .}}]}}
`))
	m := h.mesh()
	h.run(m, "builder") // no stuck detector: the session waits for iteration.analyzed
	h.start(m, "dlq-builder", parsePRD(t, oneTask), workspace(t, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Bus.Follow(ctx, "dlq-builder", func(env events.Envelope) (bool, error) {
		return env.Type == events.IterationCompleted, nil
	}); err != nil {
		t.Fatal(err)
	}
	// An analysis whose payload is not one: the builder's consumer
	// dead-letters it at once.
	bad := events.Envelope{ID: "dlq-builder/1/iteration.analyzed/T1", Type: events.IterationAnalyzed, Schema: events.SchemaVersion,
		Session: "dlq-builder", Task: "T1", Step: 1, Time: time.Now(), Data: json.RawMessage(`{"signal": 5}`)}
	if _, err := m.Bus.JetStream().Publish(ctx, events.Subject(h.cfg.Prefix, events.DefaultTeam, "dlq-builder", events.IterationAnalyzed), bad.Marshal()); err != nil {
		t.Fatal(err)
	}
	d := last[events.SessionFailedData](t, h.wait(m, "dlq-builder"), events.SessionFailed)
	if !strings.HasPrefix(d.Reason, "builder gave up on iteration.analyzed at step 1 after 1 delivery: ") || !strings.Contains(d.Reason, "invalid") {
		t.Fatalf("reason %q", d.Reason)
	}
}

// A session nothing happens in (no critic is running) is escalated by the
// watchdog with what it waited for; once a critic runs, a person resumes it
// and it completes. A long step is no silence: the stage at work on it
// keeps the session alive.
func TestWatchdogEscalatesASilentSession(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {turn: 1}, reply: {content: "Waiting for the build.", tool_calls: [{name: run, arguments: {command: "sleep 4"}}]}}
  - {model: builder, reply: {content: "Nothing more to do; done."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	h.cfg.Builder.WatchdogIdle = 2 * time.Second
	h.cfg.Stream.AckWait = 900 * time.Millisecond // a heartbeat, and a sign of life, every 300ms
	m := h.mesh()
	h.run(m, "builder", "stuckdetector")
	h.start(m, "watchdog", parsePRD(t, oneTask), workspace(t, nil))
	got := h.wait(m, "watchdog")
	d := last[events.SessionEscalatedData](t, got, events.SessionEscalated)
	if !strings.HasPrefix(d.Reason, "no event for ") || !strings.HasSuffix(d.Reason, " while waiting for critique.completed at step 2; is a critic running?") {
		t.Fatalf("escalation reason %q", d.Reason)
	}
	if n := len(eventsOf[events.IterationRecord](t, got, events.IterationCompleted)); n != 2 {
		t.Fatalf("%d iterations before the escalation, want 2 (the 4s step was not taken for silence)", n)
	}

	h.run(m, "critic")
	resume := events.Must(events.SessionResumed, "watchdog", d.TaskID, got[len(got)-1].Step, time.Now(),
		events.SessionResumedData{Message: "The critic is running now."})
	if err := m.Bus.Publish(context.Background(), resume); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var end events.Envelope
	seen := false
	if err := m.Bus.Follow(ctx, "watchdog", func(env events.Envelope) (bool, error) {
		seen = seen || env.ID == resume.ID
		end = env
		return seen && env.Type.Terminal(), nil
	}); err != nil || end.Type != events.SessionCompleted {
		t.Fatalf("after the resume the session ended with %s (%v)", end.Type, err)
	}
}

// Redis losing a session's state (restarted without persistence) is said,
// not taken for a bad event: the session fails with the reason.
func TestLostStateFailsTheSessionWithTheReason(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, reply: {content: "Building.", tool_calls: [{name: run, arguments: {command: "touch sleeping; sleep 1"}}]}}
`))
	m := h.mesh()
	h.run(m, "builder", "stuckdetector")
	ws := workspace(t, nil)
	h.start(m, "lost-state", parsePRD(t, oneTask), ws)
	waitFile(t, ws+"/sleeping")
	// What a Redis restarted without persistence does to the session.
	rdb := m.Store.Client()
	keys, err := rdb.Keys(context.Background(), h.cfg.Prefix+":{lost-state}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("session keys %v (%v)", keys, err)
	}
	if err := rdb.Del(context.Background(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
	d := last[events.SessionFailedData](t, h.wait(m, "lost-state"), events.SessionFailed)
	if !strings.HasPrefix(d.Reason, "session state is gone: Redis lost it; is persistence on?") {
		t.Fatalf("reason %q", d.Reason)
	}
}

// ownRedis points the harness at a redis-server of the test's own, which
// it can stop and start.
func ownRedis(t *testing.T, h *harness) *meshtest.RedisServer {
	t.Helper()
	r := meshtest.StartRedis(t)
	h.cfg.Redis.URL = r.URL()
	// A delivery's backoff is short, so without riding out the two
	// deliveries would be used up within seconds of outage.
	h.cfg.Stream.MaxDeliver = 2
	h.cfg.Stream.BackoffBase = 100 * time.Millisecond
	h.cfg.Stream.BackoffMax = 200 * time.Millisecond
	return r
}

// A Redis outage longer than every delivery's backoff together is waited
// out: the session completes once Redis is back, with nothing lost or
// done twice.
func TestRedisOutageWithinTheBudgetIsRiddenOut(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {turn: 1}, reply: {content: "Building.", tool_calls: [{name: run, arguments: {command: "touch sleeping; sleep 1; echo ran >> ran.log"}}]}}
  - {model: builder, reply: {content: "Built; done."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	r := ownRedis(t, h)
	h.cfg.Stream.OutageBudget = time.Minute
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	ws := workspace(t, nil)
	h.start(m, "outage", parsePRD(t, "tasks:\n  - {id: T1, title: one, acceptance_criteria: [x], verify: 'test \"$(wc -l < ran.log)\" -eq 1'}\n"), ws)
	waitFile(t, ws+"/sleeping")
	r.Stop()
	// The outage: longer than the deliveries take to be used up, go-redis's
	// own retries of each call included.
	time.Sleep(15 * time.Second)
	r.Start()
	got := h.wait(m, "outage")
	last[events.SessionCompletedData](t, got, events.SessionCompleted)
	if n := h.llm.Hits(""); n != 0 {
		t.Fatalf("unexpected unnamed hits %d", n)
	}
}

// An outage longer than the budget ends the session with the reason, even
// though the state cannot be written; the state is brought in line once
// Redis is back.
func TestRedisOutagePastTheBudgetFailsTheSession(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, reply: {content: "Building.", tool_calls: [{name: run, arguments: {command: "touch sleeping; sleep 1"}}]}}
`))
	r := ownRedis(t, h)
	h.cfg.Stream.OutageBudget = 2 * time.Second
	h.cfg.Builder.WatchdogIdle = 2 * time.Second
	m := h.mesh()
	h.run(m, "builder", "stuckdetector")
	ws := workspace(t, nil)
	h.start(m, "long-outage", parsePRD(t, oneTask), ws)
	waitFile(t, ws+"/sleeping")
	r.Stop()
	d := last[events.SessionFailedData](t, h.wait(m, "long-outage"), events.SessionFailed)
	for _, want := range []string{"builder gave up on iteration.requested at step 1", "longer than the outage budget of 2s", "connection refused",
		"the session state could not be updated"} {
		if !strings.Contains(d.Reason, want) {
			t.Errorf("reason %q does not say %q", d.Reason, want)
		}
	}
	r.Start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st builder.State
		if _, err := m.Store.LoadState(context.Background(), "long-outage", &st); err == nil && st.Phase == builder.PhaseFailed {
			if st.Reason != d.Reason {
				t.Fatalf("the state says %q, the event %q", st.Reason, d.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the state was not brought in line with the failure once Redis was back")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
