package builder

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

var limitsUnderTest = events.Limits{MaxTurnsPerTask: 5, MaxIterations: 20, MaxTotalTokens: 10_000,
	MaxDecomposeDepth: 2, MaxSubtasks: 4, ContextWindow: 100_000, CompactAt: 70_000}

// workTypes are the events that start or continue work: an iteration, a
// model call of another stage, a task.
var workTypes = []events.Type{events.IterationRequested, events.TaskStarted, events.CritiqueRequested,
	events.PruneRequested, events.DecomposeRequested, events.CompactionRequested}

// reach puts the state at one limit.
var reach = []struct {
	limit  string
	at     func(s *State)
	reason string
}{
	{"max_turns_per_task", func(s *State) { s.CurrentTask().Turns = s.Limits.MaxTurnsPerTask }, "used all 5 turns"},
	{"max_iterations", func(s *State) { s.Iteration = s.Limits.MaxIterations }, "max_iterations (20)"},
	{"max_total_tokens", func(s *State) { s.Tokens = s.Limits.MaxTotalTokens }, "token budget exhausted: 10000 of 10000"},
}

// inPhase moves a started session (T1 active, step 1) to phase p as a
// transition would.
func inPhase(s *State, p Phase) {
	s.Phase = p
	if p == PhaseReviewing {
		s.CurrentTask().Status = TaskReview
	}
}

// Every input of the state machine, with the limits reached one at a time:
// no transition starts or continues work past a limit, it ends the session
// with the limit as the reason. The exceptions are the ones the limits
// mean: a review is stopped only by the token budget (it judges work done
// within the turns), and a task that starts afresh (the next task, a
// subtask, a resumed task) has its own turns.
func TestEveryTransitionChecksEveryLimit(t *testing.T) {
	sig := func(a events.Action) *events.Signal {
		return &events.Signal{Pattern: "p", Confidence: 0.9, Action: a, Diagnosis: "d"}
	}
	cases := []struct {
		name string
		// setup puts a started session where the input applies and
		// returns the input.
		setup func(s *State) Input
		// work is what the transition does when a limit does not stop it;
		// allowed names the limits that do not.
		work    events.Type
		allowed []string
	}{
		{name: "iteration done (records the step, starts nothing)", setup: func(s *State) Input {
			return IterationDone{Step: s.Step, Record: events.IterationRecord{Iteration: s.Iteration + 1}}
		}, work: events.IterationCompleted, allowed: []string{"max_turns_per_task", "max_iterations", "max_total_tokens"}},
		{name: "analysis of a healthy step", setup: func(s *State) Input {
			inPhase(s, PhaseAnalyzing)
			return Analyzed{Step: s.Step}
		}, work: events.IterationRequested},
		{name: "analysis with a nudge", setup: func(s *State) Input {
			inPhase(s, PhaseAnalyzing)
			return Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: sig(events.ActionNudge)}}
		}, work: events.IterationRequested},
		{name: "analysis with a prune", setup: func(s *State) Input {
			inPhase(s, PhaseAnalyzing)
			return Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: sig(events.ActionPrune)}}
		}, work: events.PruneRequested},
		{name: "analysis with a decomposition", setup: func(s *State) Input {
			inPhase(s, PhaseAnalyzing)
			return Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: sig(events.ActionDecompose)}}
		}, work: events.DecomposeRequested},
		{name: "analysis with compaction due", setup: func(s *State) Input {
			inPhase(s, PhaseAnalyzing)
			s.ContextTokens = s.Limits.CompactAt
			return Analyzed{Step: s.Step}
		}, work: events.CompactionRequested},
		{name: "analysis of a claim", setup: func(s *State) Input {
			inPhase(s, PhaseAnalyzing)
			return Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}}
		}, work: events.CritiqueRequested, allowed: []string{"max_turns_per_task", "max_iterations"}},
		{name: "approval starts the next task", setup: func(s *State) Input {
			inPhase(s, PhaseReviewing)
			return Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Verdict: events.Verdict{Approved: true}}}
		}, work: events.IterationRequested, allowed: []string{"max_turns_per_task"}},
		{name: "approval of the last subtask starts the parent's review", setup: func(s *State) Input {
			s.Tasks = []TaskState{
				{Task: prd.Task{ID: "T1.1", Title: "a", AcceptanceCriteria: []string{"a"}, ParentID: "T1"}, Status: TaskDone, Depth: 1},
				{Task: prd.Task{ID: "T1.2", Title: "b", AcceptanceCriteria: []string{"b"}, ParentID: "T1"}, Status: TaskReview, Depth: 1},
				{Task: prd.Task{ID: "T1", Title: "one", AcceptanceCriteria: []string{"a"}, DependsOn: []string{"T1.1", "T1.2"}},
					Status: TaskPending, Subtasks: []string{"T1.1", "T1.2"}},
			}
			s.Current = 1
			inPhase(s, PhaseReviewing)
			return Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1.2", Verdict: events.Verdict{Approved: true}}}
		}, work: events.CritiqueRequested, allowed: []string{"max_turns_per_task", "max_iterations"}},
		{name: "a commit made starts the next task", setup: func(s *State) Input {
			s.Git = &GitState{Git: events.Git{Branch: "ralph/x"}}
			inPhase(s, PhaseCommitting)
			return Committed{Step: s.Step, Result: CommitResult{Commit: &events.Commit{TaskID: "T1", SHA: "c1"}}}
		}, work: events.IterationRequested, allowed: []string{"max_turns_per_task"}},
		{name: "a commit refused by a hook", setup: func(s *State) Input {
			s.Git = &GitState{Git: events.Git{Branch: "ralph/x"}}
			inPhase(s, PhaseCommitting)
			return Committed{Step: s.Step, Result: CommitResult{RejectedBy: "pre-commit hook", Output: "lint"}}
		}, work: events.IterationRequested},
		{name: "rejection", setup: func(s *State) Input {
			inPhase(s, PhaseReviewing)
			return Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Verdict: events.Verdict{Feedback: "no"}}}
		}, work: events.IterationRequested},
		{name: "prune done", setup: func(s *State) Input {
			inPhase(s, PhasePruning)
			s.Signal = sig(events.ActionPrune)
			return Pruned{Step: s.Step, Data: events.PruneCompletedData{TaskID: "T1"}}
		}, work: events.IterationRequested},
		{name: "prune failed: the next rung", setup: func(s *State) Input {
			inPhase(s, PhasePruning)
			s.Signal = sig(events.ActionPrune)
			s.CurrentTask().Interventions = []string{"prune:p"}
			return Pruned{Step: s.Step, Data: events.PruneCompletedData{TaskID: "T1", Error: "nothing removable"}}
		}, work: events.DecomposeRequested},
		{name: "decomposition starts the first subtask", setup: func(s *State) Input {
			inPhase(s, PhaseDecomposing)
			s.Signal = sig(events.ActionDecompose)
			return Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: subtasks("T1.1", "T1.2")}}
		}, work: events.IterationRequested, allowed: []string{"max_turns_per_task"}},
		{name: "compaction done", setup: func(s *State) Input {
			inPhase(s, PhaseCompacting)
			return Compacted{Step: s.Step, Data: events.CompactionCompletedData{TaskID: "T1", TokensBefore: 900, TokensAfter: 300}}
		}, work: events.IterationRequested},
		{name: "compaction failed within the window", setup: func(s *State) Input {
			inPhase(s, PhaseCompacting)
			return Compacted{Step: s.Step, Data: events.CompactionCompletedData{TaskID: "T1", Error: "model down"}}
		}, work: events.IterationRequested},
		{name: "resume", setup: func(s *State) Input {
			inPhase(s, PhaseEscalated)
			return Resumed{Step: s.Step, Data: events.SessionResumedData{Message: "try the other API"}}
		}, work: events.IterationRequested, allowed: []string{"max_turns_per_task"}},
	}
	for _, c := range cases {
		for _, l := range reach {
			t.Run(c.name+"/"+l.limit, func(t *testing.T) {
				s, _ := Start("s1", twoTasks(), limitsUnderTest, t0)
				in := c.setup(&s)
				l.at(&s)
				next, cmds, err := Next(s, in, t0)
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				got := published(cmds)
				if slices.Contains(c.allowed, l.limit) {
					if !slices.Contains(got, c.work) || slices.Contains(got, events.SessionFailed) {
						t.Fatalf("published %v; want %s, which %s does not stop", got, c.work, l.limit)
					}
					return
				}
				for _, w := range workTypes {
					if slices.Contains(got, w) {
						t.Errorf("published %s past %s (all: %v)", w, l.limit, got)
					}
				}
				if next.Phase != PhaseFailed || !slices.Contains(got, events.SessionFailed) || !strings.Contains(next.Reason, l.reason) {
					t.Errorf("phase %s, published %v, reason %q; want session.failed naming %q", next.Phase, got, next.Reason, l.reason)
				}
			})
		}
	}
}

// The reported case: every task is approved on its first iteration, so no
// iteration ever reached the check after an analysed step, and a session
// with max_iterations 3 ran on through every task.
func TestApprovalsStopAtMaxIterations(t *testing.T) {
	var p prd.PRD
	for i := range 10 {
		p.Tasks = append(p.Tasks, prd.Task{ID: fmt.Sprintf("T%d", i+1), Title: "t", AcceptanceCriteria: []string{"done"}})
	}
	lim := limitsUnderTest
	lim.MaxIterations = 3
	s, _ := Start("s1", events.SessionStartedData{Workspace: "/ws", PRD: p}, lim, t0)
	requested := 1
	for range p.Tasks {
		var cmds []Command
		s, _ = step(t, s, record(s, 10, claimed))
		s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
		s, cmds = step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: s.CurrentTask().ID, Verdict: events.Verdict{Approved: true}}})
		for _, typ := range published(cmds) {
			if typ == events.IterationRequested {
				requested++
			}
		}
		if s.Done() {
			break
		}
	}
	if s.Phase != PhaseFailed || !strings.Contains(s.Reason, "max_iterations (3)") || s.Iteration != 3 || requested != 3 {
		t.Fatalf("phase %s (%s) after %d iterations, %d requested; want failed at max_iterations after 3", s.Phase, s.Reason, s.Iteration, requested)
	}
}
