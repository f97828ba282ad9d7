package builder

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Phase is where a session is in its loop.
type Phase string

const (
	// PhaseIterating: iteration.requested for Step is out; a replica runs it.
	PhaseIterating Phase = "iterating"
	// PhaseAnalyzing: the iteration ran; waiting for iteration.analyzed.
	PhaseAnalyzing Phase = "analyzing"
	// PhaseReviewing: critique.requested is out; waiting for the verdict.
	PhaseReviewing Phase = "reviewing"
	PhaseCompleted Phase = "completed"
	PhaseFailed    Phase = "failed"
	PhaseEscalated Phase = "escalated"
)

// Task statuses.
const (
	TaskPending = "pending"
	TaskActive  = "active"
	TaskReview  = "review"
	TaskDone    = "done"
)

// TaskState is a task of the session's task graph and how it is going.
type TaskState struct {
	prd.Task
	Status        string   `json:"status"`
	Turns         int      `json:"turns"`
	Attempts      int      `json:"attempts"`
	Interventions []string `json:"interventions,omitempty"`
	FilesChanged  []string `json:"files_changed,omitempty"`
	Summary       string   `json:"summary,omitempty"`
}

// Command is an effect of a transition. The service persists the commands
// with the new state, then executes them; both kinds are idempotent (unit
// ids, message ids), so a redelivered event re-executes them harmlessly.
type Command struct {
	Publish *events.Envelope `json:"publish,omitempty"`
	Append  *Append          `json:"append,omitempty"`
}

// Append adds units to a task's context.
type Append struct {
	Scope string       `json:"scope"`
	Units []units.Unit `json:"units"`
}

// State is one session, kept in Redis under compare-and-set.
type State struct {
	Session   string        `json:"session"`
	Workspace string        `json:"workspace"`
	Limits    events.Limits `json:"limits"`
	Tasks     []TaskState   `json:"tasks"`
	Current   int           `json:"current"`
	Phase     Phase         `json:"phase"`
	Step      int           `json:"step"`
	Iteration int           `json:"iteration"`
	Tokens    int           `json:"tokens"`
	Reason    string        `json:"reason,omitempty"`
	Pending   []Command     `json:"pending,omitempty"`
}

// CurrentTask is the task being worked on.
func (s *State) CurrentTask() *TaskState {
	if s.Current < 0 || s.Current >= len(s.Tasks) {
		return nil
	}
	return &s.Tasks[s.Current]
}

// Done reports whether the session has ended.
func (s *State) Done() bool {
	return s.Phase == PhaseCompleted || s.Phase == PhaseFailed || s.Phase == PhaseEscalated
}

// ErrStale: the event belongs to a step or phase the session has left; it
// is a duplicate or a late redelivery.
var ErrStale = errors.New("stale event")

// Start creates the state of a new session from session.started.
func Start(session string, d events.SessionStartedData, defaults events.Limits, now time.Time) (State, []Command) {
	lim := d.Limits
	if lim.MaxTurnsPerTask == 0 {
		lim.MaxTurnsPerTask = defaults.MaxTurnsPerTask
	}
	if lim.MaxIterations == 0 {
		lim.MaxIterations = defaults.MaxIterations
	}
	if lim.MaxTotalTokens == 0 {
		lim.MaxTotalTokens = defaults.MaxTotalTokens
	}
	s := State{Session: session, Workspace: d.Workspace, Limits: lim, Current: -1}
	for _, t := range d.PRD.Tasks {
		s.Tasks = append(s.Tasks, TaskState{Task: t, Status: TaskPending})
	}
	cmds := s.startNextTask(now)
	return s, cmds
}

// IterationDone is the outcome of running step Step.
type IterationDone struct {
	Step   int
	Record events.IterationRecord
}

// Analyzed is the stuck detector's view of step Step.
type Analyzed struct {
	Step int
	Data events.IterationAnalyzedData
}

// Critiqued is the critic's verdict on step Step.
type Critiqued struct {
	Step int
	Data events.CritiqueCompletedData
}

// Next applies one input to the state. It is pure: the caller supplies the
// clock and performs the returned commands.
func Next(s State, in any, now time.Time) (State, []Command, error) {
	s.Tasks = slices.Clone(s.Tasks)
	switch ev := in.(type) {
	case IterationDone:
		if s.Phase != PhaseIterating || ev.Step != s.Step {
			return s, nil, ErrStale
		}
		return s.iterationDone(ev, now)
	case Analyzed:
		if s.Phase != PhaseAnalyzing || ev.Step != s.Step {
			return s, nil, ErrStale
		}
		return s.analyzed(ev, now)
	case Critiqued:
		if s.Phase != PhaseReviewing || ev.Step != s.Step {
			return s, nil, ErrStale
		}
		return s.critiqued(ev, now)
	default:
		return s, nil, fmt.Errorf("builder: unknown input %T", in)
	}
}

func (s State) iterationDone(ev IterationDone, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	rec := ev.Record
	s.Iteration = rec.Iteration
	s.Tokens += rec.Usage.InputTokens + rec.Usage.OutputTokens
	t.Turns++
	for _, f := range rec.FilesChanged {
		if !slices.Contains(t.FilesChanged, f) {
			t.FilesChanged = append(t.FilesChanged, f)
		}
	}
	if rec.ClaimedDone {
		t.Summary = rec.AssistantText
	}
	s.Phase = PhaseAnalyzing
	return s, []Command{s.publish(events.IterationCompleted, rec, now)}, nil
}

func (s State) analyzed(ev Analyzed, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	if s.Tokens >= s.Limits.MaxTotalTokens {
		return s.fail(fmt.Sprintf("token budget exhausted: %d of %d tokens used", s.Tokens, s.Limits.MaxTotalTokens), now)
	}
	if sig := ev.Data.Signal; sig != nil {
		return s.intervene(*sig, now)
	}
	if ev.Data.ClaimedDone {
		t.Status = TaskReview
		t.Attempts++
		s.Phase = PhaseReviewing
		return s, []Command{s.publish(events.CritiqueRequested, events.CritiqueRequestedData{
			Task: t.Task, Workspace: s.Workspace, Summary: t.Summary,
			FilesChanged: t.FilesChanged, Attempt: t.Attempts,
		}, now)}, nil
	}
	return s.continueTask(nil, now)
}

// intervene picks what to do about a stuck signal. A first signal on a task
// gets a nudge that names the loop; a signal after a nudge, or one that asks
// for escalation, escalates with what was tried. Pruning and decomposition
// are recommended by the detector but are carried out by their own services,
// which this build does not have yet, so until then they fall back to the
// nudge-then-escalate ladder.
func (s State) intervene(sig events.Signal, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	if sig.Action != events.ActionEscalate && !slices.ContainsFunc(t.Interventions, func(i string) bool { return strings.HasPrefix(i, "nudge") }) {
		t.Interventions = append(t.Interventions, "nudge:"+sig.Pattern)
		nudge := units.Unit{
			ID: fmt.Sprintf("nudge-%d", s.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
			Turn: t.Turns,
			Content: fmt.Sprintf("You appear to be stuck (%s, confidence %.2f): %s. "+
				"Do not repeat the same action. Step back, reconsider the acceptance criteria, and try a different approach.",
				sig.Pattern, sig.Confidence, sig.Diagnosis),
		}
		return s.continueTask(&Append{Scope: t.ID, Units: []units.Unit{nudge}}, now)
	}
	t.Interventions = append(t.Interventions, "escalate:"+sig.Pattern)
	s.Phase = PhaseEscalated
	s.Reason = fmt.Sprintf("task %s stuck (%s): %s", t.ID, sig.Pattern, sig.Diagnosis)
	return s, []Command{s.publish(events.SessionEscalated, events.SessionEscalatedData{
		TaskID: t.ID, Reason: s.Reason, Diagnosis: sig.Diagnosis, Tried: t.Interventions, Signal: &sig,
	}, now)}, nil
}

func (s State) critiqued(ev Critiqued, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	v := ev.Data.Verdict
	if v.Approved {
		t.Status = TaskDone
		cmds := []Command{s.publish(events.TaskCompleted, events.TaskCompletedData{
			TaskID: t.ID, Iterations: t.Turns, Attempts: t.Attempts,
		}, now)}
		return s, append(cmds, s.startNextTask(now)...), nil
	}
	t.Status = TaskActive
	return s.continueTask(&Append{Scope: t.ID, Units: []units.Unit{{
		ID: fmt.Sprintf("critique-%d", s.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
		Turn: t.Turns, Content: RejectionMessage(ev.Data),
	}}}, now)
}

// continueTask requests the next iteration of the current task unless a
// limit says stop.
func (s State) continueTask(app *Append, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	if t.Turns >= s.Limits.MaxTurnsPerTask {
		return s.fail(fmt.Sprintf("task %s used all %d turns without being approved", t.ID, s.Limits.MaxTurnsPerTask), now)
	}
	if s.Iteration >= s.Limits.MaxIterations {
		return s.fail(fmt.Sprintf("session reached max_iterations (%d)", s.Limits.MaxIterations), now)
	}
	var cmds []Command
	if app != nil {
		cmds = append(cmds, Command{Append: app})
	}
	s.Step++
	s.Phase = PhaseIterating
	return s, append(cmds, s.publish(events.IterationRequested, events.IterationRequestedData{Iteration: s.Iteration + 1}, now)), nil
}

// startNextTask moves to the first pending task whose dependencies are done,
// or completes the session.
func (s *State) startNextTask(now time.Time) []Command {
	next := -1
	for i, t := range s.Tasks {
		if t.Status != TaskPending {
			continue
		}
		ready := true
		for _, d := range t.DependsOn {
			if j := s.taskIndex(d); j < 0 || s.Tasks[j].Status != TaskDone {
				ready = false
			}
		}
		if ready {
			next = i
			break
		}
	}
	if next < 0 {
		s.Current = -1
		for _, t := range s.Tasks {
			if t.Status != TaskDone {
				s.Phase = PhaseFailed
				s.Reason = fmt.Sprintf("no runnable task: %s is %s", t.ID, t.Status)
				return []Command{s.publish(events.SessionFailed, events.SessionFailedData{Reason: s.Reason, Iterations: s.Iteration, Tokens: s.Tokens}, now)}
			}
		}
		s.Phase = PhaseCompleted
		return []Command{s.publish(events.SessionCompleted, events.SessionCompletedData{Tasks: len(s.Tasks), Iterations: s.Iteration, Tokens: s.Tokens}, now)}
	}
	s.Current = next
	t := &s.Tasks[next]
	t.Status = TaskActive
	s.Step++
	s.Phase = PhaseIterating
	return []Command{
		s.publish(events.TaskStarted, events.TaskStartedData{Task: t.Task}, now),
		{Append: &Append{Scope: t.ID, Units: InitialContext(s.Workspace, t.Task)}},
		s.publish(events.IterationRequested, events.IterationRequestedData{Iteration: s.Iteration + 1}, now),
	}
}

func (s State) fail(reason string, now time.Time) (State, []Command, error) {
	s.Phase = PhaseFailed
	s.Reason = reason
	return s, []Command{s.publish(events.SessionFailed, events.SessionFailedData{Reason: reason, Iterations: s.Iteration, Tokens: s.Tokens}, now)}, nil
}

func (s *State) taskIndex(id string) int {
	for i, t := range s.Tasks {
		if t.ID == id {
			return i
		}
	}
	return -1
}

func (s *State) publish(typ events.Type, payload any, now time.Time) Command {
	task := ""
	if t := s.CurrentTask(); t != nil {
		task = t.ID
	}
	env := events.Must(typ, s.Session, task, s.Step, now, payload)
	return Command{Publish: &env}
}

// RejectionMessage turns a critic's rejection into the instruction the
// builder model sees next.
func RejectionMessage(d events.CritiqueCompletedData) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The reviewer did not accept task %s (attempt %d).\n", d.TaskID, d.Attempt)
	if d.Verify != nil && d.Verify.ExitCode != 0 {
		fmt.Fprintf(&b, "The verify command `%s` failed with exit code %d", d.Verify.Command, d.Verify.ExitCode)
		if d.Verify.TimedOut {
			b.WriteString(" (timed out)")
		}
		b.WriteString(".\n")
		if d.Verify.Output != "" {
			fmt.Fprintf(&b, "Its output:\n%s\n", d.Verify.Output)
		}
	}
	if d.Verdict.Feedback != "" {
		fmt.Fprintf(&b, "Feedback: %s\n", d.Verdict.Feedback)
	}
	if len(d.Verdict.UnmetCriteria) > 0 {
		b.WriteString("Unmet criteria:\n")
		for _, c := range d.Verdict.UnmetCriteria {
			fmt.Fprintf(&b, "- %s\n", c)
		}
	}
	b.WriteString("Fix these points, check your work, then reply without tool calls when the task is done.")
	return b.String()
}

// InitialContext is the context a task starts with: the system prompt and
// the task with its acceptance criteria.
func InitialContext(workspace string, t prd.Task) []units.Unit {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s: %s\n", t.ID, t.Title)
	if t.Description != "" {
		fmt.Fprintf(&b, "\n%s\n", t.Description)
	}
	b.WriteString("\nAcceptance criteria:\n")
	for _, c := range t.AcceptanceCriteria {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	if t.Verify != "" {
		fmt.Fprintf(&b, "\nThe reviewer will run `%s` in the workspace; it must exit 0.\n", t.Verify)
	}
	return []units.Unit{
		{ID: "system-" + t.ID, Role: openai.ChatMessageRoleSystem, Kind: units.KindMessage, Content: SystemPrompt},
		{ID: "task-" + t.ID, Role: openai.ChatMessageRoleUser, Kind: units.KindMessage, Content: b.String()},
	}
}

// SystemPrompt is what the builder model is told about its job.
const SystemPrompt = `You are the Builder of Ralph mesh, a software engineer working in a workspace directory.
Work on the task you are given, one step at a time, using the tools: read_file, write_file, edit_file,
list_dir, search, run (a shell command in the workspace) and read_artifact (full outputs that were too
long to show). Paths are relative to the workspace; you cannot leave it.
Check your work (run the tests or the verify command) before you say you are done.
When the task is complete and every acceptance criterion is met, reply with a short summary of what you
did and no tool calls: that reply hands the task to the reviewer.`
