package builder

import (
	"errors"
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

var defaults = events.Limits{MaxTurnsPerTask: 5, MaxIterations: 20, MaxTotalTokens: 10_000}

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

// step drives one input and fails the test on error.
func step(t *testing.T, s State, in any) (State, []Command) {
	t.Helper()
	next, cmds, err := Next(s, in, t0)
	if err != nil {
		t.Fatalf("Next(%T): %v", in, err)
	}
	return next, cmds
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
			name: "first stuck signal nudges",
			drive: func(t *testing.T, s State) (State, []Command) {
				s, _ = step(t, s, record(s, 100))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: &events.Signal{
					Pattern: "circular_tools", Confidence: 0.85, Action: events.ActionPrune, Diagnosis: "read a.go 3 times"}}})
			},
			want: want{phase: PhaseIterating, published: []events.Type{events.IterationRequested}, appended: []string{"nudge-1"}},
		},
		{
			name: "second stuck signal escalates",
			drive: func(t *testing.T, s State) (State, []Command) {
				sig := &events.Signal{Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}
				s, _ = step(t, s, record(s, 100))
				s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: sig}})
				s, _ = step(t, s, record(s, 100))
				return step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: sig}})
			},
			want: want{phase: PhaseEscalated, published: []events.Type{events.SessionEscalated}, reason: "task T1 stuck (no_progress)"},
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
		in   any
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

func TestPointerDigestKeepsWholeLines(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 1000; i++ {
		b.WriteString(strings.Repeat("x", i%50))
		b.WriteString("|end\n")
	}
	text := b.String()
	d := PointerDigest(text, "a-1", 2000)
	if !strings.Contains(d, "artifact a-1") || !strings.Contains(d, "lines not shown") {
		t.Fatalf("digest:\n%s", d)
	}
	for _, line := range strings.Split(d, "\n")[1:] {
		if line != "" && !strings.HasSuffix(line, "|end") && !strings.HasPrefix(line, "[") {
			t.Fatalf("line cut mid-way: %q", line)
		}
	}
}
