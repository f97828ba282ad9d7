package builder

import (
	"fmt"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/units"
)

// This file is the state machine's part of the work product: an approved
// task becomes one commit on the session's branch (CommitPlan, made by the
// shell), and its outcome (Committed) decides whether the task is done.

// GitState is the session's branch and where it stands.
type GitState struct {
	events.Git
	// Head is the branch's last commit: the base of the next task, and
	// where a resumed session goes on from.
	Head string `json:"head"`
	// PushDigest identifies the URL of Git.Push when the session started,
	// before the agent could change the repository's configuration:
	// commits are pushed only while the remote still has that URL. The URL
	// itself is not kept (it may carry a token).
	PushDigest string `json:"push_digest,omitempty"`
	// Commits are the session's commits, oldest first.
	Commits []events.Commit `json:"commits,omitempty"`
	// Patterns is the "Codebase patterns" section of progress.txt, which
	// every task starts with.
	Patterns string `json:"patterns,omitempty"`
}

// GitStart is what the shell found when it put the workspace on the
// session's branch.
type GitStart struct {
	Head, PushDigest, Patterns string
}

// CommitPlan is the commit of an approved task and the notes that go in
// it.
type CommitPlan struct {
	Team      string `json:"team,omitempty"`
	Session   string `json:"session"`
	Workspace string `json:"workspace"`
	// Step is the step of the approval: the commit's outcome is journaled
	// there, so a redelivery replays it instead of committing again.
	Step   int    `json:"step"`
	TaskID string `json:"task_id"`
	Base   string `json:"base"`
	Branch string `json:"branch"`
	// Push and PushDigest: the remote to push to, and its URL's digest
	// when the session started.
	Push       string          `json:"push,omitempty"`
	PushDigest string          `json:"push_digest,omitempty"`
	Message    gitwork.Message `json:"message"`
	// PRDFile and Story: the prd.json story whose passes becomes true in
	// the same commit; empty for a subtask or a session without one.
	PRDFile string `json:"prd_file,omitempty"`
	Story   string `json:"story,omitempty"`
	// Progress is the task's entry in progress.txt.
	Progress ProgressEntry `json:"progress"`
}

// Committed is the outcome of the commit of the task approved at step
// Step.
type Committed struct {
	Step   int
	Result CommitResult
}

// CommitResult is what came of a CommitPlan, as the journal keeps it.
type CommitResult struct {
	// Commit is the commit made (or found again by its trailers); nil when
	// there was nothing to commit.
	Commit *events.Commit `json:"commit,omitempty"`
	// RejectedBy names what refused the work (the pre-commit hook, the
	// prd.json), and Output what it said: the builder's to answer.
	RejectedBy string `json:"rejected_by,omitempty"`
	Output     string `json:"output,omitempty"`
	// Error is git failing (not a hook): a person must look.
	Error string `json:"error,omitempty"`
	// Patterns is progress.txt's "Codebase patterns" section after the
	// commit.
	Patterns string `json:"patterns,omitempty"`
}

// commitPlan is the commit of t, approved with verdict d.
func (s *State) commitPlan(t *TaskState, d events.CritiqueCompletedData) *CommitPlan {
	verdict := strings.TrimSpace(d.Verdict.Feedback)
	if verdict == "" {
		verdict = "Approved by the critic."
	}
	verify := ""
	if d.Verify != nil && d.Verify.ExitCode == 0 {
		verify = d.Verify.Command
		verdict += fmt.Sprintf(" The verify command `%s` passed.", verify)
	}
	p := &CommitPlan{
		Team: s.Team, Session: s.Session, Workspace: s.Workspace, Step: s.Step, TaskID: t.ID, Base: t.Base, Branch: s.Git.Branch, Push: s.Git.Push, PushDigest: s.Git.PushDigest,
		Message: gitwork.Message{Subject: t.ID + ": " + t.Title, Body: verdict, Session: s.Session, Task: t.ID},
		Progress: ProgressEntry{Session: s.Session, TaskID: t.ID, Title: t.Title, Summary: t.Summary,
			Files: t.FilesChanged, Verdict: strings.TrimSpace(d.Verdict.Feedback), Verify: verify},
	}
	// Only a task of the PRD is a story; a subtask's parent is ticked off
	// when the parent is approved.
	if s.Git.PRDFile != "" && t.ParentID == "" {
		p.PRDFile, p.Story = s.Git.PRDFile, t.ID
	}
	return p
}

// committed ends the current task's review with its commit: done, or
// rejected by a hook (back to the builder, as a critic's rejection is), or
// escalated when git itself failed.
func (s *State) committed(ev Committed, now time.Time) ([]Command, error) {
	t := s.CurrentTask()
	r := ev.Result
	switch {
	case r.Error != "":
		t.Status = TaskActive
		return s.escalate(fmt.Sprintf("task %s was approved but could not be committed: %s; fix the repository, then resume the session", t.ID, r.Error), nil, now)
	case r.RejectedBy != "":
		t.Status = TaskActive
		return s.continueTask(&Append{Scope: t.ID, Units: []units.Unit{{
			ID: fmt.Sprintf("commit-refused-%d", s.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
			Turn: t.Turns, Content: CommitRejection(t.ID, r.RejectedBy, r.Output),
		}}}, now)
	}
	if r.Patterns != "" {
		s.Git.Patterns = r.Patterns
	}
	if r.Commit != nil {
		s.Git.Head = r.Commit.SHA
		s.Git.Commits = append(s.Git.Commits, *r.Commit)
	}
	return s.taskDone(r.Commit, now), nil
}

// taskDone marks the current task done, with its commit if it has one,
// and starts the next.
func (s *State) taskDone(c *events.Commit, now time.Time) []Command {
	t := s.CurrentTask()
	t.Status = TaskDone
	cmds := []Command{s.publish(events.TaskCompleted, events.TaskCompletedData{
		TaskID: t.ID, Iterations: t.Turns, Attempts: t.Attempts, Commit: c,
	}, now)}
	return append(cmds, s.startNextTask(now)...)
}

// CommitRejection is what the builder model is told when the repository
// refused the commit of work the critic approved.
func CommitRejection(task, by, output string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The reviewer approved task %s, but the commit was refused by the repository's %s.\n", task, by)
	if out := strings.TrimSpace(output); out != "" {
		fmt.Fprintf(&b, "Its output:\n%s\n", out)
	}
	b.WriteString("Fix what it reports (run the check yourself to see it pass), then reply without tool calls when the task is done.")
	return b.String()
}

// PatternsUnit is the unit a task starts with that holds what earlier
// tasks learned of the codebase (progress.txt's "Codebase patterns").
func PatternsUnit(task, patterns string) units.Unit {
	return units.Unit{
		ID: "patterns-" + task, Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
		Content: "Codebase patterns that earlier tasks found (from progress.txt in the workspace); follow them:\n" + patterns,
	}
}
