package builder

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func twoTasks() events.SessionStartedData {
	return events.SessionStartedData{Workspace: "/ws", PRD: prd.PRD{Tasks: []prd.Task{
		{ID: "T1", Title: "one", AcceptanceCriteria: []string{"a"}},
		{ID: "T2", Title: "two", AcceptanceCriteria: []string{"b"}, DependsOn: []string{"T1"}},
	}}}
}

var defaults = events.Limits{MaxTurnsPerTask: 5, MaxIterations: 20, MaxTotalTokens: 10_000, MaxDecomposeDepth: 2, MaxSubtasks: 4}

// published lists the event types among commands.
func published(cmds []Command) []events.Type {
	var out []events.Type
	for _, c := range cmds {
		if c.Publish != nil {
			out = append(out, c.Publish.Type)
		}
	}
	return out
}

func appended(cmds []Command) []string {
	var out []string
	for _, c := range cmds {
		if c.Append != nil {
			for _, u := range c.Append.Units {
				out = append(out, u.ID)
			}
		}
	}
	return out
}

func eq[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestStart(t *testing.T) {
	s, cmds := Start("s1", twoTasks(), defaults, t0)
	if s.Phase != PhaseIterating || s.Step != 1 || s.Current != 0 || s.Tasks[0].Status != TaskActive {
		t.Fatalf("state after start: %+v", s)
	}
	if got := published(cmds); !eq(got, []events.Type{events.TaskStarted, events.IterationRequested}) {
		t.Fatalf("published %v", got)
	}
	if got := appended(cmds); !eq(got, []string{"system-T1", "task-T1"}) {
		t.Fatalf("appended %v", got)
	}
	if s.Limits != defaults {
		t.Fatalf("limits %+v", s.Limits)
	}
	// Message ids are deterministic: the same start gives the same ids.
	_, again := Start("s1", twoTasks(), defaults, t0.Add(time.Hour))
	if cmds[0].Publish.ID != again[0].Publish.ID {
		t.Fatal("message ids depend on the clock")
	}
}

// step drives one input and fails the test on error. It also checks that
// Next left the caller's state as it was, deep-equal before and after, so
// every transition the tests drive (the table cases, the ladder, the
// decompositions) is checked for writes into its input.
func step(t *testing.T, s State, in Input) (State, []Command) {
	t.Helper()
	before := snapshot(t, s)
	next, cmds, err := Next(s, in, t0)
	if err != nil {
		t.Fatalf("Next(%T): %v", in, err)
	}
	if after := snapshot(t, s); !reflect.DeepEqual(before, after) {
		t.Fatalf("Next(%T) changed the caller's state:\nbefore %+v\nafter  %+v", in, before, after)
	}
	return next, cmds
}

// snapshot is an independent deep copy of s (through JSON, which is also
// how the service stores it), so that a shallow copy sharing slices with s
// cannot hide a write.
func snapshot(t *testing.T, s State) State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var c State
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func record(s State, usage int, opts ...func(*events.IterationRecord)) IterationDone {
	r := events.IterationRecord{Iteration: s.Iteration + 1, TaskID: s.CurrentTask().ID, Usage: events.Usage{InputTokens: usage}}
	for _, o := range opts {
		o(&r)
	}
	return IterationDone{Step: s.Step, Record: r}
}

func claimed(r *events.IterationRecord) { r.ClaimedDone = true; r.AssistantText = "done" }

func TestTransitions(t *testing.T) {
	type want struct {
		phase     Phase
		published []events.Type
		appended  []string
		reason    string
	}
	cases := []struct {
		name string
		// drive takes the session from Start to the transition under test
		// and returns the last state and commands.
		drive func(t *testing.T, s State) (State, []Command)
		want  want
	}{
		{
			name: "iteration done goes to analysis",
			drive: func(t *testing.T, s State) (State, []Command) {
				return step(t, s, record(s, 100))
			},
			want: want{phase: PhaseAnalyzing, published: []events.Type{events.IterationCompleted}},
		},
		{
			name: "healthy iteration asks for the next",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Iteration: 1}})
			},
			want: want{phase: PhaseIterating, published: []events.Type{events.IterationRequested}},
		},
		{
			name: "claimed done asks the critic",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100, claimed))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Iteration: 1, ClaimedDone: true}})
			},
			want: want{phase: PhaseReviewing, published: []events.Type{events.CritiqueRequested}},
		},
		{
			name: "approval completes the task and starts the next",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100, claimed))
				s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
				return step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Verdict: events.Verdict{Approved: true}}})
			},
			want: want{phase: PhaseIterating, published: []events.Type{events.TaskCompleted, events.TaskStarted, events.IterationRequested},
				appended: []string{"system-T2", "task-T2"}},
		},
		{
			name: "rejection becomes an instruction and the loop goes on",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100, claimed))
				s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
				return step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1",
					Verdict: events.Verdict{Feedback: "add tests", UnmetCriteria: []string{"a"}}}})
			},
			want: want{phase: PhaseIterating, published: []events.Type{events.IterationRequested}, appended: []string{"critique-1"}},
		},
		{
			name: "a nudge signal nudges",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: &events.Signal{
					Pattern: "circular_tools", Confidence: 0.85, Action: events.ActionNudge, Diagnosis: "read a.go 3 times"}}})
			},
			want: want{phase: PhaseIterating, published: []events.Type{events.IterationRequested}, appended: []string{"nudge-1"}},
		},
		{
			name: "a prune signal asks the pruner",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: &events.Signal{
					Pattern: "repetitive_output", Confidence: 0.9, Action: events.ActionPrune, Diagnosis: "same text"}}})
			},
			want: want{phase: PhasePruning, published: []events.Type{events.PruneRequested}},
		},
		{
			name: "a decompose signal asks the decomposer",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: &events.Signal{
					Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}}})
			},
			want: want{phase: PhaseDecomposing, published: []events.Type{events.DecomposeRequested}},
		},
		{
			name: "an escalate action escalates at once",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: &events.Signal{
					Pattern: "x", Confidence: 1, Action: events.ActionEscalate, Diagnosis: "d"}}})
			},
			want: want{phase: PhaseEscalated, published: []events.Type{events.SessionEscalated}},
		},
		{
			name: "token budget fails the session",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 10_000))
				return step(t, s, Analyzed{Step: s.Step})
			},
			want: want{phase: PhaseFailed, published: []events.Type{events.SessionFailed}, reason: "token budget exhausted: 10000 of 10000"},
		},
		{
			name: "turn limit fails the session",
			drive: func(t *testing.T, s State) (State, []Command) {
				var cmds []Command
				for i := 0; i < defaults.MaxTurnsPerTask; i++ {
					s, _ = step(t, s, record(s, 1))
					s, cmds = step(t, s, Analyzed{Step: s.Step})
				}
				return s, cmds
			},
			want: want{phase: PhaseFailed, published: []events.Type{events.SessionFailed}, reason: "task T1 used all 5 turns"},
		},
		{
			name: "last approval completes the session",
			drive: func(t *testing.T, s State) (State, []Command) {
				var cmds []Command
				for _, id := range []string{"T1", "T2"} {
					s, _ = step(t, s, record(s, 1, claimed))
					s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
					s, cmds = step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: id, Verdict: events.Verdict{Approved: true}}})
				}
				return s, cmds
			},
			want: want{phase: PhaseCompleted, published: []events.Type{events.TaskCompleted, events.SessionCompleted}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := Start("s1", twoTasks(), defaults, t0)
			s, cmds := c.drive(t, s)
			if s.Phase != c.want.phase {
				t.Errorf("phase %s, want %s", s.Phase, c.want.phase)
			}
			if got := published(cmds); !eq(got, c.want.published) {
				t.Errorf("published %v, want %v", got, c.want.published)
			}
			if got := appended(cmds); !eq(got, c.want.appended) {
				t.Errorf("appended %v, want %v", got, c.want.appended)
			}
			if !strings.Contains(s.Reason, c.want.reason) {
				t.Errorf("reason %q, want it to contain %q", s.Reason, c.want.reason)
			}
		})
	}
}

func TestStaleInputs(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	cases := []struct {
		name string
		in   Input
	}{
		{"analysis before the iteration ran", Analyzed{Step: s.Step}},
		{"verdict while iterating", Critiqued{Step: s.Step}},
		{"iteration of an old step", IterationDone{Step: s.Step - 1, Record: events.IterationRecord{Iteration: 1}}},
		{"iteration of a future step", IterationDone{Step: s.Step + 1, Record: events.IterationRecord{Iteration: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next, cmds, err := Next(s, c.in, t0)
			if !errors.Is(err, ErrStale) || cmds != nil || next.Step != s.Step || next.Phase != s.Phase {
				t.Fatalf("err %v, cmds %v", err, cmds)
			}
		})
	}
	// A duplicate of an input that was applied is stale too.
	s2, _ := step(t, s, record(s, 1))
	if _, _, err := Next(s2, record(s, 1), t0); !errors.Is(err, ErrStale) {
		t.Fatalf("duplicate iteration: %v", err)
	}
}

func TestNextDoesNotMutateItsInput(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	before := s.Tasks[0]
	_, _, _ = Next(s, record(s, 50, func(r *events.IterationRecord) { r.FilesChanged = []string{"a.go"} }), t0)
	if s.Tasks[0].Turns != before.Turns || len(s.Tasks[0].FilesChanged) != 0 {
		t.Fatal("Next changed the caller's state")
	}
}

// TestNextResultsShareNoSlices: two transitions from the same state (a
// retry after a lost compare-and-set does this) give independent results.
// A task's slice with spare capacity, shared between them, would let the
// second append overwrite what the first result holds.
func TestNextResultsShareNoSlices(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	// As a state built by appending has: room for one more file.
	files := make([]string, 3, 4)
	copy(files, []string{"a.go", "b.go", "c.go"})
	s.CurrentTask().FilesChanged = files
	first, _ := step(t, s, record(s, 1, func(r *events.IterationRecord) { r.FilesChanged = []string{"x.go"} }))
	_, _ = step(t, s, record(s, 1, func(r *events.IterationRecord) { r.FilesChanged = []string{"y.go"} }))
	if got := first.CurrentTask().FilesChanged; !eq(got, []string{"a.go", "b.go", "c.go", "x.go"}) {
		t.Fatalf("first result's files changed became %v after a second transition from the same state", got)
	}
}

func TestDependenciesDecideTheOrder(t *testing.T) {
	d := events.SessionStartedData{Workspace: "/ws", PRD: prd.PRD{Tasks: []prd.Task{
		{ID: "B", Title: "b", AcceptanceCriteria: []string{"x"}, DependsOn: []string{"A"}},
		{ID: "A", Title: "a", AcceptanceCriteria: []string{"x"}},
	}}}
	s, _ := Start("s1", d, defaults, t0)
	if s.CurrentTask().ID != "A" {
		t.Fatalf("started %s, want A (B depends on it)", s.CurrentTask().ID)
	}
}

func TestRejectionMessageCarriesVerifyOutput(t *testing.T) {
	msg := RejectionMessage(events.CritiqueCompletedData{TaskID: "T1", Attempt: 2,
		Verify:  &events.VerifyResult{Command: "go test ./...", ExitCode: 1, Output: "--- FAIL: TestX"},
		Verdict: events.Verdict{Feedback: "tests fail", UnmetCriteria: []string{"tests pass"}}})
	for _, want := range []string{"attempt 2", "go test ./...", "exit code 1", "--- FAIL: TestX", "tests fail", "- tests pass"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

// stuck drives one iteration that the detector flags with sig.
func stuck(t *testing.T, s State, sig events.Signal) (State, []Command) {
	t.Helper()
	s, _ = step(t, s, record(s, 10))
	return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: &sig}})
}

func payload[T any](t *testing.T, cmds []Command, typ events.Type) T {
	t.Helper()
	var v T
	for _, c := range cmds {
		if c.Publish != nil && c.Publish.Type == typ {
			if err := c.Publish.Decode(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s among %v", typ, published(cmds))
	return v
}

func subtasks(ids ...string) []prd.Task {
	var out []prd.Task
	for _, id := range ids {
		out = append(out, prd.Task{ID: id, Title: "part " + id, AcceptanceCriteria: []string{"criterion of " + id}})
	}
	return out
}

var loop = events.Signal{Pattern: "circular_tools", Confidence: 0.85, Action: events.ActionNudge, Diagnosis: "read a.go 3 times"}

// TestLadder: every signal climbs from the recommended rung, never
// repeating what was tried on the task: nudge, prune, decompose, escalate.
func TestLadder(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)

	s, cmds := stuck(t, s, loop)
	if s.Phase != PhaseIterating || !eq(appended(cmds), []string{"nudge-1"}) {
		t.Fatalf("first signal: phase %s, appended %v; want a nudge", s.Phase, appended(cmds))
	}
	s, cmds = stuck(t, s, loop)
	if s.Phase != PhasePruning {
		t.Fatalf("second nudge-level signal: phase %s, want pruning (a nudge is not repeated)", s.Phase)
	}
	if req := payload[events.PruneRequestedData](t, cmds, events.PruneRequested); req.TaskID != "T1" || req.Signal.Pattern != "circular_tools" {
		t.Fatalf("prune request %+v", req)
	}
	// The pruner is done: the loop goes on with the pruned context.
	s, cmds = step(t, s, Pruned{Step: s.Step, Data: events.PruneCompletedData{TaskID: "T1", TokensBefore: 900, TokensAfter: 300}})
	if s.Phase != PhaseIterating || !eq(published(cmds), []events.Type{events.IterationRequested}) {
		t.Fatalf("after prune: phase %s, published %v", s.Phase, published(cmds))
	}
	s, cmds = stuck(t, s, loop)
	if s.Phase != PhaseDecomposing {
		t.Fatalf("third signal: phase %s, want decomposing", s.Phase)
	}
	req := payload[events.DecomposeRequestedData](t, cmds, events.DecomposeRequested)
	if req.Task.ID != "T1" || req.Depth != 0 || req.MaxSubtasks != defaults.MaxSubtasks || !eq(req.TakenIDs, []string{"T1", "T2"}) {
		t.Fatalf("decompose request %+v", req)
	}
	if !eq(req.Tried, []string{"nudge:circular_tools", "prune:circular_tools", "decompose:circular_tools"}) {
		t.Fatalf("tried %v", req.Tried)
	}
	// The decomposer could not produce subtasks: escalate with its reason.
	s, cmds = step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Error: "invalid JSON after one repair: unexpected end"}})
	if s.Phase != PhaseEscalated {
		t.Fatalf("failed decomposition: phase %s, want escalated", s.Phase)
	}
	esc := payload[events.SessionEscalatedData](t, cmds, events.SessionEscalated)
	if !strings.Contains(esc.Reason, "could not be decomposed: invalid JSON") || esc.TaskID != "T1" || len(esc.Tried) != 3 || esc.Signal == nil {
		t.Fatalf("escalation %+v", esc)
	}

	// A person resumes it: their guidance is appended and the loop goes on.
	s, cmds = step(t, s, Resumed{Step: s.Step, Data: events.SessionResumedData{Message: "use the cached config"}})
	if s.Phase != PhaseIterating || s.Reason != "" || s.CurrentTask().Turns != 0 {
		t.Fatalf("after resume: %+v", s)
	}
	if got := appended(cmds); len(got) != 1 || !strings.HasPrefix(got[0], "guidance-") {
		t.Fatalf("resume appended %v", got)
	}
	if !strings.Contains(cmds[0].Append.Units[0].Content, "use the cached config") {
		t.Fatalf("guidance unit %q", cmds[0].Append.Units[0].Content)
	}
	// Stuck again after the ladder was climbed: straight to a person.
	s, cmds = stuck(t, s, loop)
	if s.Phase != PhaseEscalated || !eq(published(cmds), []events.Type{events.SessionEscalated}) {
		t.Fatalf("stuck after resume: phase %s, published %v", s.Phase, published(cmds))
	}
}

func TestFailedPruneMovesOn(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	s, _ = stuck(t, s, events.Signal{Pattern: "repetitive_output", Confidence: 0.9, Action: events.ActionPrune, Diagnosis: "d"})
	s, cmds := step(t, s, Pruned{Step: s.Step, Data: events.PruneCompletedData{TaskID: "T1", Error: "context changed 5 times while pruning"}})
	if s.Phase != PhaseDecomposing || !eq(published(cmds), []events.Type{events.DecomposeRequested}) {
		t.Fatalf("after a failed prune: phase %s, published %v; want the decomposer asked", s.Phase, published(cmds))
	}
	if !slices.ContainsFunc(s.CurrentTask().Interventions, func(i string) bool { return strings.HasPrefix(i, "prune failed: context changed") }) {
		t.Fatalf("interventions %v do not record the failed prune", s.CurrentTask().Interventions)
	}
}

func TestDecomposition(t *testing.T) {
	decompose := events.Signal{Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}
	s, _ := Start("s1", twoTasks(), defaults, t0)
	s, _ = step(t, s, record(s, 10)) // T1 turn 1
	s, _ = step(t, s, Analyzed{Step: s.Step})
	s, _ = stuck(t, s, decompose)
	s, cmds := step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: subtasks("T1.1", "T1.2")}})

	var order []string
	for _, ts := range s.Tasks {
		order = append(order, ts.ID)
	}
	if !eq(order, []string{"T1.1", "T1.2", "T1", "T2"}) {
		t.Fatalf("task order %v: subtasks go before their parent", order)
	}
	if s.CurrentTask().ID != "T1.1" || s.CurrentTask().Depth != 1 || s.CurrentTask().ParentID != "T1" {
		t.Fatalf("current %+v", s.CurrentTask())
	}
	if got := appended(cmds); !eq(got, []string{"system-T1.1", "task-T1.1", "parent-T1.1"}) {
		t.Fatalf("subtask context %v", got)
	}
	parent := s.Tasks[2]
	if parent.Status != TaskPending || parent.Turns != 0 || !eq(parent.Subtasks, []string{"T1.1", "T1.2"}) || !eq(parent.DependsOn, []string{"T1.1", "T1.2"}) {
		t.Fatalf("parent %+v", parent)
	}

	approve := func(s State, id string) (State, []Command) {
		s, _ = step(t, s, record(s, 1, claimed))
		s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
		return step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: id, Verdict: events.Verdict{Approved: true}}})
	}
	s, _ = approve(s, "T1.1")
	if s.CurrentTask().ID != "T1.2" {
		t.Fatalf("after T1.1: current %s", s.CurrentTask().ID)
	}
	s, cmds = approve(s, "T1.2")
	// The parent is not done because its subtasks are: the critic reviews
	// it against its own criteria, without another iteration.
	if s.CurrentTask().ID != "T1" || s.Phase != PhaseReviewing {
		t.Fatalf("after the last subtask: current %s, phase %s; want T1 under review", s.CurrentTask().ID, s.Phase)
	}
	crit := payload[events.CritiqueRequestedData](t, cmds, events.CritiqueRequested)
	if crit.Task.ID != "T1" || !strings.Contains(crit.Summary, "T1.1: part T1.1") || !strings.Contains(crit.Summary, "T1.2") {
		t.Fatalf("parent review request %+v", crit)
	}
	// Rejected: the parent goes on with iterations of its own.
	s, _ = step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Verdict: events.Verdict{Feedback: "glue missing"}}})
	if s.Phase != PhaseIterating || s.CurrentTask().ID != "T1" {
		t.Fatalf("parent rejected: phase %s current %s", s.Phase, s.CurrentTask().ID)
	}
	s, _ = approve(s, "T1")
	if s.CurrentTask().ID != "T2" || s.Tasks[2].Status != TaskDone {
		t.Fatalf("after parent approval: current %s, parent %s", s.CurrentTask().ID, s.Tasks[2].Status)
	}
}

func TestDecompositionGuards(t *testing.T) {
	decompose := events.Signal{Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}
	parentAgain := subtasks("T1.1", "T1.2")
	parentAgain[1].Title, parentAgain[1].AcceptanceCriteria = "one", []string{"a"}
	forward := subtasks("T1.1", "T1.2")
	forward[0].DependsOn = []string{"T1.2"}
	cases := []struct {
		name   string
		subs   []prd.Task
		reason string
	}{
		{"one subtask", subtasks("T1.1"), "1 subtasks, want 2 to 3"},
		{"too many", subtasks("a", "b", "c", "d"), "4 subtasks, want 2 to 3"},
		{"id taken", subtasks("T1.1", "T2"), `id "T2" is already taken`},
		{"duplicate ids", subtasks("x", "x"), `id "x" is already taken`},
		{"the parent again", parentAgain, "subtask T1.2 is the parent task again"},
		{"dependency on a later subtask", forward, `depends_on "T1.2" is not an earlier subtask`},
		{"no criteria", []prd.Task{{ID: "a", Title: "a"}, {ID: "b", Title: "b", AcceptanceCriteria: []string{"c"}}}, "subtask 1: field acceptance_criteria"},
	}
	lim := defaults
	lim.MaxSubtasks = 3
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := Start("s1", twoTasks(), lim, t0)
			s, _ = stuck(t, s, decompose)
			s, cmds := step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: c.subs}})
			if s.Phase != PhaseEscalated || len(s.Tasks) != 2 {
				t.Fatalf("phase %s with %d tasks; want escalated and the task list unchanged", s.Phase, len(s.Tasks))
			}
			if esc := payload[events.SessionEscalatedData](t, cmds, events.SessionEscalated); !strings.Contains(esc.Reason, c.reason) {
				t.Fatalf("reason %q, want it to contain %q", esc.Reason, c.reason)
			}
		})
	}
}

func TestDecompositionDepth(t *testing.T) {
	decompose := events.Signal{Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}
	lim := defaults
	lim.MaxDecomposeDepth = 1
	s, _ := Start("s1", twoTasks(), lim, t0)
	s, _ = stuck(t, s, decompose)
	s, _ = step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: subtasks("T1.1", "T1.2")}})
	// T1.1 is at depth 1 = the maximum: it is not split again.
	s, cmds := stuck(t, s, decompose)
	if s.Phase != PhaseEscalated {
		t.Fatalf("subtask at max depth: phase %s, want escalated", s.Phase)
	}
	esc := payload[events.SessionEscalatedData](t, cmds, events.SessionEscalated)
	if esc.TaskID != "T1.1" || !slices.Contains(esc.Tried, "decompose:refused at depth 1 (max 1)") {
		t.Fatalf("escalation %+v", esc)
	}
}

func TestResumeGuards(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	if _, _, err := Next(s, Resumed{Step: s.Step, Data: events.SessionResumedData{Message: "go"}}, t0); !errors.Is(err, ErrNotEscalated) {
		t.Fatalf("resume of a running session: err %v, want ErrNotEscalated", err)
	}
	s, _ = stuck(t, s, events.Signal{Pattern: "x", Confidence: 1, Action: events.ActionEscalate, Diagnosis: "d"})
	at := s.Step
	s, _ = step(t, s, Resumed{Step: at, Data: events.SessionResumedData{Message: "go"}})
	// The same resume delivered again is a duplicate, not an error.
	if _, _, err := Next(s, Resumed{Step: at, Data: events.SessionResumedData{Message: "go"}}, t0); !errors.Is(err, ErrStale) {
		t.Fatalf("duplicate resume: err %v, want ErrStale", err)
	}
}

// withContext sets the iteration's context size.
func withContext(n int) func(*events.IterationRecord) {
	return func(r *events.IterationRecord) { r.ContextTokens = n }
}

func TestCompactionOrchestrator(t *testing.T) {
	lim := defaults
	lim.MaxTurnsPerTask, lim.MaxIterations, lim.MaxTotalTokens = 50, 50, 1_000_000
	lim.ContextWindow, lim.CompactAt = 10_000, 7_000
	s, _ := Start("s1", twoTasks(), lim, t0)

	// Under the threshold: no compaction.
	s, _ = step(t, s, record(s, 10, withContext(6_999)))
	s, cmds := step(t, s, Analyzed{Step: s.Step})
	if s.Phase != PhaseIterating || !eq(published(cmds), []events.Type{events.IterationRequested}) {
		t.Fatalf("under the threshold: phase %s, published %v", s.Phase, published(cmds))
	}
	// At the threshold: explore -> compact -> continue, several times.
	for cycle := 1; cycle <= 3; cycle++ {
		s, _ = step(t, s, record(s, 10, withContext(7_000), func(r *events.IterationRecord) { r.FilesChanged = []string{"draft.md"} }))
		s, cmds = step(t, s, Analyzed{Step: s.Step})
		if s.Phase != PhaseCompacting {
			t.Fatalf("cycle %d: phase %s, want compacting", cycle, s.Phase)
		}
		req := payload[events.CompactionRequestedData](t, cmds, events.CompactionRequested)
		if req.TaskID != "T1" || req.ContextTokens != 7_000 || req.LimitTokens != 10_000 || !eq(req.FilesChanged, []string{"draft.md"}) {
			t.Fatalf("cycle %d: request %+v", cycle, req)
		}
		s, cmds = step(t, s, Compacted{Step: s.Step, Data: events.CompactionCompletedData{TaskID: "T1", TokensBefore: 7_000, TokensAfter: 3_000}})
		if s.Phase != PhaseIterating || !eq(published(cmds), []events.Type{events.IterationRequested}) {
			t.Fatalf("cycle %d after compaction: phase %s, published %v", cycle, s.Phase, published(cmds))
		}
		if s.Compactions != cycle || s.CompactedTokens != 4_000*cycle || s.ContextTokens != 3_000 || !s.JustCompacted {
			t.Fatalf("cycle %d: compactions %d, compacted %d, context %d, just %v", cycle, s.Compactions, s.CompactedTokens, s.ContextTokens, s.JustCompacted)
		}
	}
	// A compaction with nothing it may touch yet changes nothing and is not
	// counted.
	s, _ = step(t, s, record(s, 10, withContext(7_500)))
	s, _ = step(t, s, Analyzed{Step: s.Step})
	s, _ = step(t, s, Compacted{Step: s.Step, Data: events.CompactionCompletedData{TaskID: "T1", TokensBefore: 7_500, TokensAfter: 7_500}})
	if s.Phase != PhaseIterating || s.Compactions != 3 || s.JustCompacted {
		t.Fatalf("empty compaction: phase %s, compactions %d, just %v", s.Phase, s.Compactions, s.JustCompacted)
	}
	// A compaction that failed while the context still fits: go on.
	s, _ = step(t, s, record(s, 10, withContext(8_000)))
	if s.JustCompacted {
		t.Fatal("JustCompacted survives the step after the compaction")
	}
	s, _ = step(t, s, Analyzed{Step: s.Step})
	s, _ = step(t, s, Compacted{Step: s.Step, Data: events.CompactionCompletedData{TaskID: "T1", Error: "summarizer model down"}})
	if s.Phase != PhaseIterating || s.Compactions != 3 {
		t.Fatalf("failed compaction under the window: phase %s, compactions %d", s.Phase, s.Compactions)
	}
	// Over the window and compaction failed: stop with the reason.
	s, _ = step(t, s, record(s, 10, withContext(10_500)))
	s, _ = step(t, s, Analyzed{Step: s.Step})
	s, cmds = step(t, s, Compacted{Step: s.Step, Data: events.CompactionCompletedData{TaskID: "T1", Error: "summarizer model down"}})
	if s.Phase != PhaseFailed || !strings.Contains(s.Reason, "over the model's window of 10000, and compaction failed: summarizer model down") {
		t.Fatalf("failed compaction over the window: phase %s, reason %q", s.Phase, s.Reason)
	}
	if f := payload[events.SessionFailedData](t, cmds, events.SessionFailed); f.Compactions != 3 {
		t.Fatalf("failure reports %d compactions, want 3", f.Compactions)
	}
}

func TestCompactionStopsAtTheLimits(t *testing.T) {
	lim := defaults
	lim.ContextWindow, lim.CompactAt = 10_000, 7_000
	// The token budget is spent: the session fails with it rather than
	// compacting.
	s, _ := Start("s1", twoTasks(), lim, t0)
	s, _ = step(t, s, record(s, lim.MaxTotalTokens, withContext(9_000)))
	s, cmds := step(t, s, Analyzed{Step: s.Step})
	if s.Phase != PhaseFailed || !eq(published(cmds), []events.Type{events.SessionFailed}) || !strings.Contains(s.Reason, "token budget exhausted") {
		t.Fatalf("budget: phase %s, published %v, reason %q", s.Phase, published(cmds), s.Reason)
	}
	// The turn limit is reached: no compaction for a step that will not run.
	s, _ = Start("s1", twoTasks(), lim, t0)
	for i := 0; i < lim.MaxTurnsPerTask; i++ {
		s, _ = step(t, s, record(s, 1, withContext(100)))
		if i == lim.MaxTurnsPerTask-1 {
			s.ContextTokens = 9_000
		}
		s, cmds = step(t, s, Analyzed{Step: s.Step})
	}
	if s.Phase != PhaseFailed || !strings.Contains(s.Reason, "used all 5 turns") || !eq(published(cmds), []events.Type{events.SessionFailed}) {
		t.Fatalf("turn limit: phase %s, reason %q, published %v", s.Phase, s.Reason, published(cmds))
	}
}

func TestCriticOutageEscalates(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	s, _ = step(t, s, record(s, 1, claimed))
	s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
	s, cmds := step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Attempt: 1,
		Error: "the critic could not review attempt 1: 503 upstream overloaded"}})
	if s.Phase != PhaseEscalated || !strings.Contains(s.Reason, "task T1 could not be reviewed: the critic could not review attempt 1: 503") {
		t.Fatalf("phase %s, reason %q", s.Phase, s.Reason)
	}
	esc := payload[events.SessionEscalatedData](t, cmds, events.SessionEscalated)
	if esc.TaskID != "T1" || esc.Signal != nil {
		t.Fatalf("escalation %+v", esc)
	}
	// Resumed: the builder works on and claims the task done again.
	s, cmds = step(t, s, Resumed{Step: s.Step, Data: events.SessionResumedData{Message: "the critic is back"}})
	if s.Phase != PhaseIterating || s.CurrentTask().Status != TaskActive || !eq(published(cmds), []events.Type{events.IterationRequested}) {
		t.Fatalf("after resume: phase %s, status %s, published %v", s.Phase, s.CurrentTask().Status, published(cmds))
	}
}

// TestDecomposedParentReviewNamesSubtaskFiles: the critic judges a
// decomposed task by what its subtasks wrote, so the parent's review
// request names every file any subtask changed, besides the parent's own.
func TestDecomposedParentReviewNamesSubtaskFiles(t *testing.T) {
	decompose := events.Signal{Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}
	files := func(fs ...string) func(*events.IterationRecord) {
		return func(r *events.IterationRecord) { r.FilesChanged = fs }
	}
	s, _ := Start("s1", twoTasks(), defaults, t0)
	s, _ = step(t, s, record(s, 1, files("parent.go")))
	s, _ = step(t, s, Analyzed{Step: s.Step})
	s, _ = stuck(t, s, decompose)
	s, _ = step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: subtasks("T1.1", "T1.2")}})

	var cmds []Command
	for _, sub := range []struct {
		id    string
		files []string
	}{{"T1.1", []string{"a.go", "shared.go"}}, {"T1.2", []string{"shared.go", "b.go"}}} {
		if s.CurrentTask().ID != sub.id {
			t.Fatalf("current %s, want %s", s.CurrentTask().ID, sub.id)
		}
		s, _ = step(t, s, record(s, 1, files(sub.files[0])))
		s, _ = step(t, s, Analyzed{Step: s.Step})
		s, _ = step(t, s, record(s, 1, claimed, files(sub.files[1])))
		s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
		s, cmds = step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: sub.id, Verdict: events.Verdict{Approved: true}}})
	}
	crit := payload[events.CritiqueRequestedData](t, cmds, events.CritiqueRequested)
	if crit.Task.ID != "T1" {
		t.Fatalf("review of %s, want the parent T1", crit.Task.ID)
	}
	if want := []string{"parent.go", "a.go", "shared.go", "b.go"}; !eq(crit.FilesChanged, want) {
		t.Fatalf("parent's review names files %v, want %v", crit.FilesChanged, want)
	}
	// The state keeps them too: a rejected parent claimed done again is
	// reviewed with the same files.
	if got := s.CurrentTask().FilesChanged; !eq(got, crit.FilesChanged) {
		t.Fatalf("parent's files in the state %v, in the request %v", got, crit.FilesChanged)
	}
}
