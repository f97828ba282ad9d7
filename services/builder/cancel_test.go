package builder

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
)

// A session of a team publishes every event in its team.
func TestStartForATeam(t *testing.T) {
	s, cmds := StartFor("web", "s1", twoTasks(), defaults, t0)
	if s.Team != "web" {
		t.Fatalf("team %q", s.Team)
	}
	for _, c := range cmds {
		if c.Publish != nil && c.Publish.Team != "web" {
			t.Errorf("%s is team %q's", c.Publish.Type, c.Publish.Team)
		}
	}
	s, cmds = step(t, s, record(s, 10))
	if got := cmds[0].Publish; got.Type != events.IterationCompleted || got.Team != "web" {
		t.Errorf("the next event: %s of %q", got.Type, got.Team)
	}
	if plain, _ := Start("s2", twoTasks(), defaults, t0); plain.Team != "" {
		t.Errorf("Start gives team %q", plain.Team)
	}
}

// A cancel stops the session wherever it is; the answer the session waited
// for is stale afterwards, nothing else can cancel it twice, and a resume
// goes on with the task.
func TestCancel(t *testing.T) {
	for _, c := range []struct {
		name string
		to   func(t *testing.T, s State) State
	}{
		{"iterating", func(_ *testing.T, s State) State { return s }},
		{"analyzing", func(t *testing.T, s State) State { s, _ = step(t, s, record(s, 10)); return s }},
		{"reviewing", func(t *testing.T, s State) State {
			s, _ = step(t, s, record(s, 10, claimed))
			s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Iteration: s.Iteration, ClaimedDone: true}})
			return s
		}},
		{"escalated", func(t *testing.T, s State) State {
			s, _ = stuck(t, s, events.Signal{Pattern: "x", Confidence: 1, Action: events.ActionEscalate, Diagnosis: "d"})
			return s
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := StartFor("web", "s1", twoTasks(), defaults, t0)
			s = c.to(t, s)
			was, at := s.Phase, s.Step
			s, cmds := step(t, s, Cancel{Step: at, Reason: "wrong branch"})
			if s.Phase != PhaseCancelled || s.Reason != "wrong branch" || !s.Done() || s.Step != at {
				t.Fatalf("after cancel from %s: phase %s, reason %q, step %d", was, s.Phase, s.Reason, s.Step)
			}
			d := payload[events.SessionCancelledData](t, cmds, events.SessionCancelled)
			if d.Reason != "wrong branch" || d.TaskID != "T1" || cmds[0].Publish.Team != "web" || len(cmds) != 1 {
				t.Errorf("session.cancelled: %+v (team %q), %d commands", d, cmds[0].Publish.Team, len(cmds))
			}
			if s.CurrentTask().Status == TaskReview {
				t.Error("a cancelled task is still in review")
			}
			// What the session waited for is stale now.
			for _, in := range []Input{record(s, 5), Analyzed{Step: at}, Critiqued{Step: at, Data: events.CritiqueCompletedData{TaskID: "T1"}},
				Cancel{Step: at}, LimitHit{Step: at, Reason: "x"}, TimedOut{Step: at, Idle: time.Hour}} {
				if _, _, err := Next(s, in, t0); !errors.Is(err, ErrStale) {
					t.Errorf("%T after cancel: %v, want ErrStale", in, err)
				}
			}
			s, cmds = step(t, s, Resumed{Step: at, Data: events.SessionResumedData{Message: "use main"}})
			if s.Phase != PhaseIterating || s.Step != at+1 || s.Reason != "" || s.CurrentTask().Status != TaskActive {
				t.Fatalf("after resume: %s at %d, reason %q", s.Phase, s.Step, s.Reason)
			}
			if got := appended(cmds); len(got) != 1 || !strings.HasPrefix(got[0], "guidance-") {
				t.Errorf("resume appends %v", got)
			}
			if text := cmds[0].Append.Units[0].Content; !strings.Contains(text, "A person stopped the session") || !strings.Contains(text, "use main") {
				t.Errorf("the guidance after a cancel: %q", text)
			}
		})
	}
}

func TestCancelOfAnEndedSession(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	s, _ = step(t, s, LimitHit{Step: s.Step, Reason: "team web spent 10 of its 10 tokens"})
	if s.Phase != PhaseFailed || s.Reason != "team web spent 10 of its 10 tokens" {
		t.Fatalf("after the limit: %s %q", s.Phase, s.Reason)
	}
	if _, _, err := Next(s, Cancel{Step: s.Step}, t0); !errors.Is(err, ErrStale) {
		t.Errorf("cancel of a failed session: %v, want ErrStale", err)
	}
	// A cancel without a reason says who.
	r, _ := Start("s2", twoTasks(), defaults, t0)
	r, _ = step(t, r, Cancel{Step: r.Step})
	if r.Reason != DefaultCancelReason {
		t.Errorf("reason %q", r.Reason)
	}
	// A limit hit for a step the session left is stale.
	q, _ := Start("s3", twoTasks(), defaults, t0)
	if _, _, err := Next(q, LimitHit{Step: q.Step + 1, Reason: "x"}, t0); !errors.Is(err, ErrStale) {
		t.Errorf("a limit hit of another step: %v", err)
	}
	if !Ends(PhaseCancelled, events.SessionCancelled) || Ends(PhaseCancelled, events.SessionFailed) {
		t.Error("Ends does not know cancelled")
	}
}

// The index shows a state as people read it.
func TestEntry(t *testing.T) {
	s, _ := StartFor("web", "s1", twoTasks(), defaults, t0)
	s, _ = step(t, s, record(s, 120))
	e := Entry(s, 7, map[string]int64{"builder:calls": 2, "builder:input": 100, "builder:output": 20, "critic:calls": 1, "odd": 3}, t0)
	if e.ID != "s1" || e.Team != "web" || e.State != sessionindex.StateRunning || e.CurrentTask != "T1" || e.Iterations != 1 ||
		e.Tokens != 120 || e.Version != 7 || e.Phase != string(PhaseAnalyzing) || e.Workspace != "/ws" || !e.StartedAt.Equal(t0) {
		t.Errorf("entry %+v", e)
	}
	if len(e.Tasks) != 2 || e.Tasks[0].Turns != 1 || e.Tasks[0].Status != TaskActive || e.Tasks[1].Subtasks == nil {
		t.Errorf("tasks %+v", e.Tasks)
	}
	if u := e.Usage["builder"]; u != (sessionindex.RoleUsage{Calls: 2, InputTokens: 100, OutputTokens: 20}) || e.Usage["critic"].Calls != 1 || len(e.Usage) != 2 {
		t.Errorf("usage %+v", e.Usage)
	}
	for phase, want := range map[Phase]string{PhaseCompleted: "completed", PhaseFailed: "failed", PhaseEscalated: "escalated",
		PhaseCancelled: "cancelled", PhaseReviewing: "running", PhaseCompacting: "running"} {
		if got := IndexState(phase); got != want {
			t.Errorf("IndexState(%s) = %s", phase, got)
		}
	}
	legacy, _ := Start("s2", twoTasks(), defaults, t0)
	if Entry(legacy, 1, nil, t0).Team != events.DefaultTeam {
		t.Error("a state without a team is not the default team's")
	}
}
