package mesh_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/demo"
	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/units"
)

// The demo PRD through builder -> stuckdetector -> critic -> pruner: T1 is
// approved at once, T2 is rejected once (no usage comment) and approved
// after the fix, T3 loops, is nudged on weak evidence, loops on, is pruned
// on strong evidence and then done.
func TestDemoSessionWithRejectionAndPrune(t *testing.T) {
	demoSession(t, "")
}

// The same session with a real three-master Redis Cluster as the store:
// every script and transaction of every service stays in one session's
// slot, and the compaction cache's global keys are never mixed with them.
func TestDemoSessionOnRedisCluster(t *testing.T) {
	demoSession(t, meshtest.RedisCluster(t))
}

// demoSession runs the demo session on the test NATS and on the Redis of
// redisURL ("" for the test Redis) and checks its whole course.
func demoSession(t *testing.T, redisURL string) {
	script, err := demo.Script()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, script)
	if redisURL != "" {
		h.cfg.Redis.URL = redisURL
	}
	h.cfg.Builder.Model, h.cfg.Critic.Model, h.cfg.Pruner.Model = demo.BuilderModel, demo.CriticModel, demo.PrunerModel
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector", "pruner")
	p, err := demo.PRD()
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(t.TempDir(), "ws")
	if err := demo.Workspace(ws); err != nil {
		t.Fatal(err)
	}
	h.start(m, "e2e-two-tasks", p, ws)
	got := h.wait(m, "e2e-two-tasks")

	last := got[len(got)-1]
	if last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s; events: %v", last.Type, types(got))
	}
	var verdicts []string
	var analyzed, completed int
	for _, env := range got {
		switch env.Type {
		case events.CritiqueCompleted:
			var d events.CritiqueCompletedData
			if err := env.Decode(&d); err != nil {
				t.Fatal(err)
			}
			v := d.TaskID + ":rejected"
			if d.Verdict.Approved {
				v = d.TaskID + ":approved"
			}
			verdicts = append(verdicts, v)
		case events.IterationAnalyzed:
			analyzed++
		case events.IterationCompleted:
			completed++
		}
	}
	if want := []string{"T1:approved", "T2:rejected", "T2:approved", "T3:approved"}; !slices.Equal(verdicts, want) {
		t.Fatalf("verdicts %v, want %v", verdicts, want)
	}
	if completed != 16 || analyzed != completed {
		t.Fatalf("%d iterations completed, %d analyzed; want 16 each", completed, analyzed)
	}
	if pr := eventsOf[events.PruneCompletedData](t, got, events.PruneCompleted); len(pr) != 1 || pr[0].TaskID != "T3" || pr[0].Fallback {
		t.Fatalf("prunes %+v, want T3 pruned once with the pruner model", pr)
	}
	script2, _ := os.ReadFile(filepath.Join(ws, "count.sh"))
	if !strings.HasPrefix(string(script2), "# Usage:") {
		t.Fatalf("count.sh was not fixed after the rejection:\n%s", script2)
	}
	// The rejection reached the builder model as an instruction.
	units, err := m.Store.Units(context.Background(), "e2e-two-tasks", "T2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(units, func(u unitT) bool { return strings.Contains(u.Content, "no header comment") && u.Role == "user" }) {
		t.Fatal("critic feedback is not in the T2 context")
	}
	// Every event of the session can be replayed in order.
	var replayed []events.Envelope
	if err := m.Bus.Replay(context.Background(), "e2e-two-tasks", func(env events.Envelope) error {
		replayed = append(replayed, env)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(types(replayed), types(got)) {
		t.Fatalf("replay differs:\n%v\n%v", types(replayed), types(got))
	}
	usage, err := m.Store.Usage(context.Background(), "e2e-two-tasks")
	if err != nil {
		t.Fatal(err)
	}
	if usage["builder:calls"] != 16 || usage["critic:calls"] != 4 || usage["pruner:calls"] != 1 {
		t.Fatalf("usage by role: %v", usage)
	}
	// The same mesh exports what it did as Prometheus metrics.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := m.Metrics.Serve(ctx, "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ralph_events_handled_total{outcome="ack",service="builder",type="iteration.requested"} 16`,
		`ralph_events_handled_total{outcome="ack",service="critic",type="critique.requested"} 4`,
		`ralph_events_handled_total{outcome="ack",service="pruner",type="prune.requested"} 1`,
		`ralph_llm_calls_total{role="critic"} 4`,
		`ralph_tool_calls_total{outcome="ok",tool="write_file"} 3`,
		`ralph_stuck_signals_total{action="nudge",pattern="repetitive_output"} 1`,
		`ralph_stuck_signals_total{action="prune_context",pattern="repetitive_output"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestStuckAfterPruneAndDecompositionEscalatesThenResumes: a builder that
// reads notes.txt over and over climbs the whole ladder: the loop is named,
// the context pruned, the task split, and the first subtask, stuck as well
// at the maximum depth, is escalated with what was tried. A person's
// guidance resumes it and the session completes.
func TestStuckAfterPruneAndDecompositionEscalatesThenResumes(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {any_contains: "notes are known: remember the milk", last_role: user}, reply: {content: "Understood.", tool_calls: [{name: write_file, arguments: {path: known.txt, content: "remember the milk\n"}}]}}
  - {model: builder, when: {any_contains: "notes are known: remember the milk"}, reply: {content: "The notes are known."}}
  - {model: builder, when: {first_user_contains: "Task L1.2:", last_role: user}, reply: {content: "Writing the summary.", tool_calls: [{name: write_file, arguments: {path: summary.txt, content: "milk\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task L1.2:"}, reply: {content: "summary.txt exists."}}
  - {model: builder, reply: {content: "Let me read the notes once more.", tool_calls: [{name: read_file, arguments: {path: notes.txt}}]}}
  - {model: pruner, reply: {content: "notes.txt was read many times; it says: remember the milk."}}
  - model: decomposer
    reply:
      content: '{"subtasks": [{"id": "a", "title": "Read the notes", "description": "", "acceptance_criteria": ["the notes are known"]}, {"id": "b", "title": "Write summary.txt", "description": "", "acceptance_criteria": ["summary.txt exists"], "depends_on": ["a"]}]}'
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	h.cfg.Pruner.Model = "pruner"
	h.cfg.Decomposer.Model = "decomposer"
	h.cfg.Decomposer.MaxDepth = 1
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector", "pruner", "decomposer")
	ws := workspace(t, map[string]string{"notes.txt": "remember the milk\n"})
	h.start(m, "e2e-ladder", parsePRD(t, `
tasks:
  - {id: L1, title: Summarise the notes, acceptance_criteria: [summary.txt exists]}
`), ws)
	got := h.wait(m, "e2e-ladder")

	var signals []events.Signal
	for _, d := range eventsOf[events.IterationAnalyzedData](t, got, events.IterationAnalyzed) {
		if d.Signal != nil {
			signals = append(signals, *d.Signal)
		}
	}
	if len(signals) < 3 {
		t.Fatalf("%d stuck signals, want one per rung: %+v", len(signals), signals)
	}
	for _, s := range signals {
		if s.Confidence <= 0 || s.Diagnosis == "" || !s.Action.Known() || !strings.Contains(s.Diagnosis, "notes.txt") {
			t.Fatalf("signal lacks confidence, action or a diagnosis naming the file: %+v", s)
		}
	}
	// The first detection comes within the detector's threshold of three
	// identical reads.
	if signals[0].Iteration > 3 {
		t.Fatalf("first signal at iteration %d, want by 3", signals[0].Iteration)
	}
	if n := len(eventsOf[events.PruneCompletedData](t, got, events.PruneCompleted)); n < 1 {
		t.Fatal("no prune before the decomposition")
	}
	dec := eventsOf[events.TaskDecomposedData](t, got, events.TaskDecomposed)
	if len(dec) != 1 || len(dec[0].Subtasks) != 2 {
		t.Fatalf("decompositions %+v, want one into two subtasks (the subtasks are at max depth)", dec)
	}
	last := got[len(got)-1]
	if last.Type != events.SessionEscalated {
		t.Fatalf("session ended with %s, want escalated", last.Type)
	}
	var esc events.SessionEscalatedData
	if err := last.Decode(&esc); err != nil {
		t.Fatal(err)
	}
	if esc.TaskID != "L1.1" || esc.Diagnosis == "" || esc.Signal == nil {
		t.Fatalf("escalation %+v", esc)
	}
	if !slices.ContainsFunc(esc.Tried, func(s string) bool { return strings.HasPrefix(s, "prune:") }) ||
		!slices.Contains(esc.Tried, "decompose:refused at depth 1 (max 1)") {
		t.Fatalf("escalation does not say what was tried: %v", esc.Tried)
	}
	ctxUnits, _ := m.Store.Units(context.Background(), "e2e-ladder", "L1")
	if !slices.ContainsFunc(ctxUnits, func(u unitT) bool { return strings.HasPrefix(u.ID, "pruned-") }) {
		t.Fatal("the parent's context carries no prune note")
	}

	// `ralph resume` publishes this; the CLI's own test drives the command.
	resume, err := events.New(events.SessionResumed, "e2e-ladder", esc.TaskID, last.Step, time.Now(),
		events.SessionResumedData{Message: "The notes are known: remember the milk. Stop reading notes.txt."})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Bus.Publish(context.Background(), resume); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var after []events.Envelope
	seen := false
	if err := m.Bus.Follow(ctx, "e2e-ladder", func(env events.Envelope) (bool, error) {
		seen = seen || env.ID == resume.ID
		if seen {
			after = append(after, env)
		}
		return seen && env.Type.Terminal(), nil
	}); err != nil {
		t.Fatalf("resumed session did not end: %v; events %v", err, types(after))
	}
	if end := after[len(after)-1]; end.Type != events.SessionCompleted {
		t.Fatalf("resumed session ended with %s; events %v", end.Type, types(after))
	}
	var order []string
	for _, d := range eventsOf[events.TaskCompletedData](t, after, events.TaskCompleted) {
		order = append(order, d.TaskID)
	}
	if !slices.Equal(order, []string{"L1.1", "L1.2", "L1"}) {
		t.Fatalf("after the resume, tasks completed %v", order)
	}
}

func TestBadToolCallsGoBackToTheModel(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {turn: 1}, reply: {content: "Formatting.", tool_calls: [{name: format_disk, arguments: {}}]}}
  - {model: builder, when: {turn: 2}, reply: {content: "Reading.", tool_calls: [{name: read_file, arguments: '{"path": '}]}}
  - {model: builder, when: {turn: 3}, reply: {content: "Escaping.", tool_calls: [{name: read_file, arguments: {path: ../../../../etc/passwd}}, {name: write_file, arguments: {path: /tmp/ralph-escape-test, content: x}}]}}
  - {model: builder, when: {turn: 4}, reply: {content: "Done, nothing else to do."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	ws := workspace(t, nil)
	h.start(m, "e2e-badtools", parsePRD(t, `
tasks:
  - {id: B1, title: Nothing, acceptance_criteria: [nothing]}
`), ws)
	got := h.wait(m, "e2e-badtools")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s", last.Type)
	}
	var errs []string
	for _, env := range got {
		if env.Type == events.IterationCompleted {
			var r events.IterationRecord
			if err := env.Decode(&r); err != nil {
				t.Fatal(err)
			}
			for _, c := range r.ToolCalls {
				errs = append(errs, c.Error)
			}
		}
	}
	wants := []string{"unknown tool", "not valid JSON", "escapes the workspace", "escapes the workspace"}
	if len(errs) != len(wants) {
		t.Fatalf("tool errors %q", errs)
	}
	for i, want := range wants {
		if !strings.Contains(errs[i], want) {
			t.Errorf("tool error %d = %q, want it to mention %q", i, errs[i], want)
		}
	}
	if _, err := os.Stat("/tmp/ralph-escape-test"); err == nil {
		t.Fatal("write_file escaped the workspace")
	}
	units, _ := m.Store.Units(context.Background(), "e2e-badtools", "B1")
	n := 0
	for _, u := range units {
		if u.Role == "tool" && strings.Contains(u.Content, "error:") {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d tool errors reached the model's context, want 4", n)
	}
}

// Limits end a session as failed with the reason instead of looping.
func TestTurnLimitFailsWithReason(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, reply: {content: "Writing another file.", tool_calls: [{name: run, arguments: {command: "date +%s%N | tee stamp.txt"}}]}}
`))
	h.cfg.Builder.MaxTurnsPerTask = 4
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	h.start(m, "e2e-limit", parsePRD(t, `
tasks:
  - {id: X1, title: Never ends, acceptance_criteria: [impossible]}
`), workspace(t, nil))
	got := h.wait(m, "e2e-limit")
	last := got[len(got)-1]
	var d events.SessionFailedData
	if last.Type != events.SessionFailed || last.Decode(&d) != nil || !strings.Contains(d.Reason, "used all 4 turns") {
		t.Fatalf("last event %s %s", last.Type, last.Data)
	}
}

// A builder replica dies while a step is in flight; another one takes the
// redelivered step over. The shell command that had run is replayed from the
// journal, the one that was interrupted is not run again, and the session
// completes.
func TestBuilderCrashMidStep(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - model: builder
    when: {turn: 1}
    reply:
      content: Appending and then waiting.
      tool_calls:
        - {name: run, arguments: {command: "echo ran >> ran.log"}}
        - {name: run, arguments: {command: "touch sleeping; sleep 60"}}
  - {model: builder, when: {turn: 2}, reply: {content: "ran.log has its line."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
	h.cfg.Stream.AckWait = 2 * time.Second
	h.cfg.Stream.DrainTimeout = 0
	others := h.mesh()
	h.run(others, "critic", "stuckdetector")
	first := h.mesh()
	stopFirst := h.run(first, "builder")
	ws := workspace(t, nil)
	h.start(others, "e2e-crash", parsePRD(t, `
tasks:
  - {id: C1, title: Append once, acceptance_criteria: [ran.log has one line], verify: 'test "$(wc -l < ran.log)" -eq 1'}
`), ws)
	waitFile(t, filepath.Join(ws, "sleeping"))
	stopFirst()   // the replica stops without acking the step
	first.Close() // and its connection goes away

	second := h.mesh()
	h.run(second, "builder")
	got := h.wait(others, "e2e-crash")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s: %s", last.Type, last.Data)
	}
	data, _ := os.ReadFile(filepath.Join(ws, "ran.log"))
	if string(data) != "ran\n" {
		t.Fatalf("ran.log = %q: the journaled command ran more than once", data)
	}
	var rec events.IterationRecord
	for _, env := range got {
		if env.Type == events.IterationCompleted {
			_ = env.Decode(&rec)
			break
		}
	}
	if len(rec.ToolCalls) != 2 || !strings.Contains(rec.ToolCalls[1].Error, "interrupted") {
		t.Fatalf("first iteration's tool calls: %+v", rec.ToolCalls)
	}
	if n := h.llm.Hits(""); n != 0 {
		t.Fatalf("unexpected unnamed hits %d", n)
	}
	builderCalls := 0
	for _, r := range h.llm.Requests() {
		if r.Model == "builder" {
			builderCalls++
		}
	}
	if builderCalls != 2 {
		t.Fatalf("builder model called %d times, want 2 (the redelivered step must replay the journaled reply)", builderCalls)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

type unitT = units.Unit

// A rate limit is waited out (Retry-After) inside the step; an endpoint that
// stays down fails the session with the reason once the step has used every
// delivery, instead of leaving it waiting.
func TestModelOutages(t *testing.T) {
	t.Run("429 then success", func(t *testing.T) {
		h := newHarness(t, parseScript(t, `
rules:
  - {name: limited, model: builder, times: 1, error: {status: 429, message: slow down, retry_after: 1}}
  - {model: builder, reply: {content: "Nothing to do; done."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`))
		m := h.mesh()
		h.run(m, "builder", "critic", "stuckdetector")
		h.start(m, "e2e-429", parsePRD(t, "tasks:\n  - {id: R1, title: r, acceptance_criteria: [x]}\n"), workspace(t, nil))
		got := h.wait(m, "e2e-429")
		if last := got[len(got)-1]; last.Type != events.SessionCompleted || h.llm.Hits("limited") != 1 {
			t.Fatalf("ended with %s, rate-limited %d times", last.Type, h.llm.Hits("limited"))
		}
	})
	t.Run("endpoint down", func(t *testing.T) {
		h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, error: {status: 503, message: upstream overloaded}}
`))
		h.cfg.LLM.MaxRetries = -1
		h.cfg.Stream.MaxDeliver = 2
		m := h.mesh()
		h.run(m, "builder", "critic", "stuckdetector")
		h.start(m, "e2e-down", parsePRD(t, "tasks:\n  - {id: D1, title: d, acceptance_criteria: [x]}\n"), workspace(t, nil))
		got := h.wait(m, "e2e-down")
		last := got[len(got)-1]
		var d events.SessionFailedData
		if last.Type != events.SessionFailed || last.Decode(&d) != nil || !strings.Contains(d.Reason, "503") || !strings.Contains(d.Reason, "last delivery") {
			t.Fatalf("ended with %s %s", last.Type, last.Data)
		}
	})
	t.Run("critic down", func(t *testing.T) {
		h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, reply: {content: "Nothing to do; done."}}
  - {model: critic, error: {status: 503, message: upstream overloaded}}
`))
		h.cfg.LLM.MaxRetries = -1
		h.cfg.Stream.MaxDeliver = 2
		m := h.mesh()
		h.run(m, "builder", "critic", "stuckdetector")
		h.start(m, "e2e-critic-down", parsePRD(t, "tasks:\n  - {id: C1, title: c, acceptance_criteria: [x]}\n"), workspace(t, nil))
		got := h.wait(m, "e2e-critic-down")
		last := got[len(got)-1]
		var d events.SessionEscalatedData
		if last.Type != events.SessionEscalated || last.Decode(&d) != nil || !strings.Contains(d.Reason, "could not be reviewed") || !strings.Contains(d.Reason, "503") {
			t.Fatalf("ended with %s %s; want an escalation saying the critic is down", last.Type, last.Data)
		}
		if n := len(eventsOf[events.IterationRecord](t, got, events.IterationCompleted)); n != 1 {
			t.Fatalf("%d iterations: the builder must not go on without a reviewer", n)
		}
	})
}
