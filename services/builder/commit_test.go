package builder

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

// onBranch is twoTasks on branch ralph/x, from a prd.json at the root.
func onBranch() (State, []Command) {
	d := twoTasks()
	d.Git = &events.Git{Branch: "ralph/x", PRDFile: "prd.json", Push: "origin"}
	return StartAt("", "s1", d, defaults, GitStart{Head: "base0", PushDigest: "d1g", Patterns: "- tests need FOO=1"}, t0)
}

// approve drives the current task from a claim to the critic's approval.
func approve(t *testing.T, s State, summary string) (State, []Command) {
	t.Helper()
	s, _ = step(t, s, record(s, 100, func(r *events.IterationRecord) {
		r.ClaimedDone, r.AssistantText, r.FilesChanged = true, summary, []string{"a.go"}
	}))
	s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
	return step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: s.CurrentTask().ID,
		Verdict: events.Verdict{Approved: true, Feedback: "All criteria\nare met."},
		Verify:  &events.VerifyResult{Command: "go test ./...", ExitCode: 0}}})
}

func TestApprovalOnABranchCommitsBeforeTheTaskIsDone(t *testing.T) {
	s, cmds := onBranch()
	if s.Tasks[0].Base != "base0" {
		t.Fatalf("T1 base %q, want the head it started from", s.Tasks[0].Base)
	}
	// The first task starts with the codebase patterns, right after the
	// task.
	if got := appended(cmds); !eq(got, []string{"system-T1", "task-T1", "patterns-T1"}) {
		t.Fatalf("T1 starts with %v", got)
	}
	s, cmds = approve(t, s, "Added a.go.\nLearnings:\n- Pattern: errors wrap with %w")
	if s.Phase != PhaseCommitting || s.Tasks[0].Status != TaskReview || len(published(cmds)) != 0 {
		t.Fatalf("after approval: phase %s, T1 %s, published %v", s.Phase, s.Tasks[0].Status, published(cmds))
	}
	if len(cmds) != 1 || cmds[0].Commit == nil {
		t.Fatalf("commands %+v, want one commit", cmds)
	}
	p := *cmds[0].Commit
	msg := p.Message.String()
	for _, want := range []string{"T1: one\n\nAll criteria are met. The verify command `go test ./...` passed.\n\n", "Ralph-Session: s1\nRalph-Task: T1\n"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if p.Step != s.Step || p.Base != "base0" || p.Story != "T1" || p.PRDFile != "prd.json" || p.Push != "origin" || p.PushDigest != "d1g" || p.Workspace != "/ws" {
		t.Errorf("plan %+v", p)
	}
	if p.Progress.Summary != "Added a.go.\nLearnings:\n- Pattern: errors wrap with %w" || !slices.Equal(p.Progress.Files, []string{"a.go"}) || p.Progress.Verify != "go test ./..." {
		t.Errorf("progress %+v", p.Progress)
	}

	c := &events.Commit{TaskID: "T1", SHA: "c1c1c1c1c1", Subject: "T1: one"}
	s, cmds = step(t, s, Committed{Step: s.Step, Result: CommitResult{Commit: c, Patterns: "- tests need FOO=1\n- errors wrap with %w"}})
	if s.Tasks[0].Status != TaskDone || s.Git.Head != "c1c1c1c1c1" || s.Tasks[1].Base != "c1c1c1c1c1" {
		t.Fatalf("after the commit: T1 %s, head %s, T2 base %s", s.Tasks[0].Status, s.Git.Head, s.Tasks[1].Base)
	}
	if got := published(cmds); !eq(got, []events.Type{events.TaskCompleted, events.TaskStarted, events.IterationRequested}) {
		t.Fatalf("published %v", got)
	}
	done, _ := events.DecodeAs[events.TaskCompletedData](*cmds[0].Publish)
	if done.Commit == nil || done.Commit.SHA != "c1c1c1c1c1" {
		t.Errorf("task.completed %+v lacks the commit", done)
	}
	// The next task reads the patterns the first one added.
	for _, c := range cmds {
		if c.Append != nil && c.Append.Units[2].ID == "patterns-T2" && !strings.Contains(c.Append.Units[2].Content, "errors wrap with %w") {
			t.Errorf("T2's patterns %q", c.Append.Units[2].Content)
		}
	}

	s, _ = approve(t, s, "Added b.go.")
	s, cmds = step(t, s, Committed{Step: s.Step, Result: CommitResult{Commit: &events.Commit{TaskID: "T2", SHA: "c2", Subject: "T2: two"}}})
	if s.Phase != PhaseCompleted {
		t.Fatalf("phase %s", s.Phase)
	}
	end, _ := events.DecodeAs[events.SessionCompletedData](*cmds[len(cmds)-1].Publish)
	if end.Branch != "ralph/x" || len(end.Commits) != 2 || end.Commits[0].SHA != "c1c1c1c1c1" || end.Commits[1].SHA != "c2" {
		t.Errorf("session.completed %+v", end)
	}
}

func TestWithoutABranchApprovalCompletesAtOnce(t *testing.T) {
	s, _ := Start("s1", twoTasks(), defaults, t0)
	s, cmds := approve(t, s, "done")
	if s.Tasks[0].Status != TaskDone || s.Tasks[0].Base != "" || slices.ContainsFunc(cmds, func(c Command) bool { return c.Commit != nil }) {
		t.Fatalf("T1 %s, commands %+v", s.Tasks[0].Status, cmds)
	}
}

func TestARefusedCommitIsARejection(t *testing.T) {
	s, _ := onBranch()
	s, _ = approve(t, s, "done")
	at := s.Step
	s, cmds := step(t, s, Committed{Step: at, Result: CommitResult{RejectedBy: "pre-commit hook", Output: "lint: a.go:3: trailing space"}})
	if s.Phase != PhaseIterating || s.Tasks[0].Status != TaskActive || s.Step != at+1 {
		t.Fatalf("phase %s, T1 %s, step %d", s.Phase, s.Tasks[0].Status, s.Step)
	}
	if got := appended(cmds); !eq(got, []string{"commit-refused-" + strconv.Itoa(at)}) {
		t.Fatalf("appended %v", got)
	}
	msg := cmds[0].Append.Units[0].Content
	if !strings.Contains(msg, "pre-commit hook") || !strings.Contains(msg, "trailing space") {
		t.Errorf("the model is told %q", msg)
	}
	// A later approval commits anew, at its own step.
	s, cmds = approve(t, s, "fixed")
	if s.Phase != PhaseCommitting || cmds[0].Commit.Step != s.Step || cmds[0].Commit.Step == at {
		t.Errorf("second approval: phase %s, plan %+v", s.Phase, cmds[0].Commit)
	}
}

func TestAFailedCommitEscalates(t *testing.T) {
	s, _ := onBranch()
	s, _ = approve(t, s, "done")
	s, cmds := step(t, s, Committed{Step: s.Step, Result: CommitResult{Error: "git commit: index.lock exists"}})
	if s.Phase != PhaseEscalated || !strings.Contains(s.Reason, "could not be committed: git commit: index.lock exists") {
		t.Fatalf("phase %s, reason %q", s.Phase, s.Reason)
	}
	if got := published(cmds); !eq(got, []events.Type{events.SessionEscalated}) {
		t.Fatalf("published %v", got)
	}
	// Resumed on the branch's tip, which a person may have moved.
	s, _ = step(t, s, Resumed{Step: s.Step, Data: events.SessionResumedData{Message: "removed the lock"}, Head: "fixed1"})
	if s.Git.Head != "fixed1" || s.Phase != PhaseIterating {
		t.Fatalf("after resume: head %s, phase %s", s.Git.Head, s.Phase)
	}
}

func TestCommittedOutsideCommittingIsStale(t *testing.T) {
	s, _ := onBranch()
	if _, _, err := Next(s, Committed{Step: s.Step}, t0); !errors.Is(err, ErrStale) {
		t.Errorf("while iterating: %v", err)
	}
	s, _ = approve(t, s, "done")
	if _, _, err := Next(s, Committed{Step: s.Step - 1}, t0); !errors.Is(err, ErrStale) {
		t.Errorf("another step: %v", err)
	}
}

// A subtask commits as it is approved but is no story of the prd.json;
// the parent, approved on its own criteria, ticks its story off.
func TestSubtasksCommitButOnlyTheParentIsAStory(t *testing.T) {
	s, _ := onBranch()
	s, _ = step(t, s, record(s, 100))
	s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{Signal: &events.Signal{
		Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "stuck"}}})
	s, _ = step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: subtasks("T1.1", "T1.2")}})
	if s.CurrentTask().ID != "T1.1" || s.CurrentTask().Base != "base0" {
		t.Fatalf("current %s base %s", s.CurrentTask().ID, s.CurrentTask().Base)
	}
	s, cmds := approve(t, s, "half")
	if p := cmds[0].Commit; p.Story != "" || p.TaskID != "T1.1" {
		t.Fatalf("subtask plan %+v", p)
	}
	s, _ = step(t, s, Committed{Step: s.Step, Result: CommitResult{Commit: &events.Commit{TaskID: "T1.1", SHA: "s1sha"}}})
	if s.CurrentTask().ID != "T1.2" || s.CurrentTask().Base != "s1sha" {
		t.Fatalf("current %s base %s", s.CurrentTask().ID, s.CurrentTask().Base)
	}
	s, _ = approve(t, s, "other half")
	s, _ = step(t, s, Committed{Step: s.Step, Result: CommitResult{Commit: &events.Commit{TaskID: "T1.2", SHA: "s2sha"}}})
	// The parent is reviewed on the whole of its work: from its own base.
	if s.CurrentTask().ID != "T1" || s.Phase != PhaseReviewing || s.CurrentTask().Base != "base0" {
		t.Fatalf("current %s phase %s base %s", s.CurrentTask().ID, s.Phase, s.CurrentTask().Base)
	}
	s, cmds = step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Verdict: events.Verdict{Approved: true}}})
	if p := cmds[0].Commit; p.Story != "T1" || p.Base != "base0" {
		t.Fatalf("parent plan %+v", p)
	}
	// Nothing left to commit: the parent is done without a commit.
	s, cmds = step(t, s, Committed{Step: s.Step, Result: CommitResult{}})
	if s.Tasks[s.taskIndex("T1")].Status != TaskDone || len(s.Git.Commits) != 2 {
		t.Fatalf("T1 %s, commits %v", s.Tasks[s.taskIndex("T1")].Status, s.Git.Commits)
	}
	done, _ := events.DecodeAs[events.TaskCompletedData](*cmds[0].Publish)
	if done.TaskID != "T1" || done.Commit != nil {
		t.Errorf("task.completed %+v", done)
	}
}

func TestCommittingIsWaitedForLikeAnyPhase(t *testing.T) {
	s, _ := onBranch()
	s, _ = approve(t, s, "done")
	if s.WaitingFor() != events.TaskCompleted {
		t.Errorf("waiting for %s", s.WaitingFor())
	}
	next, _, err := Next(s, DeadLettered{Step: s.Step, Type: events.CritiqueCompleted, Reason: "builder gave up"}, t0)
	if err != nil || next.Phase != PhaseFailed {
		t.Errorf("dead letter of the approval while committing: %s, %v", next.Phase, err)
	}
	next, _, err = Next(s, TimedOut{Step: s.Step, Idle: 20 * 60e9}, t0)
	if err != nil || next.Phase != PhaseEscalated {
		t.Errorf("silence while committing: %s, %v", next.Phase, err)
	}
}
