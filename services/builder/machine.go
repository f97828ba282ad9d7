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
	// PhasePruning: prune.requested is out; waiting for prune.completed.
	PhasePruning Phase = "pruning"
	// PhaseDecomposing: decompose.requested is out; waiting for
	// task.decomposed.
	PhaseDecomposing Phase = "decomposing"
	// PhaseCompacting: compaction.requested is out; waiting for
	// compaction.completed.
	PhaseCompacting Phase = "compacting"
	PhaseCompleted  Phase = "completed"
	PhaseFailed     Phase = "failed"
	// PhaseEscalated pauses the session until a person resumes it.
	PhaseEscalated Phase = "escalated"
)

// Task statuses.
const (
	TaskPending = "pending"
	TaskActive  = "active"
	TaskReview  = "review"
	TaskDone    = "done"
	// TaskDecomposed: the task's subtasks are being worked on; it becomes
	// pending again, depending on them, and is then reviewed on its own
	// criteria.
	TaskDecomposed = "decomposed"
)

// Interventions, in the order the ladder tries them for one task. Each is
// tried at most once per task: an intervention that did not unstick the
// builder is not repeated, the next one is tried.
const (
	InterventionNudge     = "nudge"
	InterventionPrune     = "prune"
	InterventionDecompose = "decompose"
	InterventionEscalate  = "escalate"
)

var ladder = []string{InterventionNudge, InterventionPrune, InterventionDecompose, InterventionEscalate}

// TaskState is a task of the session's task graph and how it is going.
type TaskState struct {
	prd.Task
	Status        string   `json:"status"`
	Turns         int      `json:"turns"`
	Attempts      int      `json:"attempts"`
	Interventions []string `json:"interventions,omitempty"`
	FilesChanged  []string `json:"files_changed,omitempty"`
	Summary       string   `json:"summary,omitempty"`
	// Depth is 0 for a PRD task and one more than its parent's for a
	// subtask.
	Depth int `json:"depth,omitempty"`
	// Subtasks are the ids decomposition created; when set, the task is
	// reviewed (not iterated on) once they are all done.
	Subtasks []string `json:"subtasks,omitempty"`
}

// tried reports whether intervention kind was already used on the task.
func (t *TaskState) tried(kind string) bool {
	return slices.ContainsFunc(t.Interventions, func(i string) bool { return i == kind || strings.HasPrefix(i, kind+":") })
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
	// Signal is the stuck signal an intervention in flight answers.
	Signal *events.Signal `json:"signal,omitempty"`
	// ContextTokens is the current task's context after the last step.
	ContextTokens int `json:"context_tokens,omitempty"`
	// Compactions and CompactedTokens count the compactions of the session
	// and the tokens they took out of the context.
	Compactions     int `json:"compactions,omitempty"`
	CompactedTokens int `json:"compacted_tokens,omitempty"`
	// JustCompacted marks the next iteration's record as the first after a
	// compaction, which the stuck detector's compaction_loop looks for.
	JustCompacted bool      `json:"just_compacted,omitempty"`
	Pending       []Command `json:"pending,omitempty"`
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
	if lim.MaxDecomposeDepth == 0 {
		lim.MaxDecomposeDepth = defaults.MaxDecomposeDepth
	}
	if lim.MaxSubtasks == 0 {
		lim.MaxSubtasks = defaults.MaxSubtasks
	}
	if lim.ContextWindow == 0 {
		lim.ContextWindow = defaults.ContextWindow
	}
	if lim.CompactAt == 0 {
		lim.CompactAt = defaults.CompactAt
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

// Pruned is the pruner's answer to the prune requested at step Step.
type Pruned struct {
	Step int
	Data events.PruneCompletedData
}

// Decomposed is the decomposer's answer to the decomposition requested at
// step Step.
type Decomposed struct {
	Step int
	Data events.TaskDecomposedData
}

// Compacted is the summarizer's answer to the compaction requested at step
// Step.
type Compacted struct {
	Step int
	Data events.CompactionCompletedData
}

// Resumed is a person's guidance for the session escalated at step Step.
type Resumed struct {
	Step int
	Data events.SessionResumedData
}

// ErrNotEscalated: a resume for a session that is not paused.
var ErrNotEscalated = errors.New("session is not escalated")

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
	case Pruned:
		if s.Phase != PhasePruning || ev.Step != s.Step {
			return s, nil, ErrStale
		}
		return s.pruned(ev, now)
	case Decomposed:
		if s.Phase != PhaseDecomposing || ev.Step != s.Step {
			return s, nil, ErrStale
		}
		return s.decomposed(ev, now)
	case Compacted:
		if s.Phase != PhaseCompacting || ev.Step != s.Step {
			return s, nil, ErrStale
		}
		return s.compacted(ev, now)
	case Resumed:
		if s.Phase != PhaseEscalated {
			if s.Step > ev.Step {
				// Resumed already: this is a redelivery.
				return s, nil, ErrStale
			}
			return s, nil, fmt.Errorf("resume at step %d: %w (phase %s)", ev.Step, ErrNotEscalated, s.Phase)
		}
		if ev.Step != s.Step {
			return s, nil, ErrStale
		}
		return s.resumed(ev, now)
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
	s.ContextTokens = rec.ContextTokens
	s.JustCompacted = false
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
	if reason := s.limitReached(); reason != "" {
		return s.fail(reason, now)
	}
	if s.Limits.CompactAt > 0 && s.ContextTokens >= s.Limits.CompactAt {
		// Explore -> compact -> continue: the context is compacted before
		// the next step, so that step still fits the model's window.
		s.Phase = PhaseCompacting
		return s, []Command{s.publish(events.CompactionRequested, events.CompactionRequestedData{
			TaskID: t.ID, Goal: t.ID + ": " + t.Title, ContextTokens: s.ContextTokens, LimitTokens: s.Limits.ContextWindow,
			Iteration: s.Iteration, Turn: t.Turns, FilesChanged: slices.Clone(t.FilesChanged),
		}, now)}, nil
	}
	return s.continueTask(nil, now)
}

// compacted goes on with the compacted context. A failed compaction is
// survivable while the context still fits the model's window: the next
// step's compaction may succeed; past the window it is not.
func (s State) compacted(ev Compacted, now time.Time) (State, []Command, error) {
	d := ev.Data
	if d.Error != "" {
		if s.ContextTokens >= s.Limits.ContextWindow {
			return s.fail(fmt.Sprintf("context of task %s is %d tokens, over the model's window of %d, and compaction failed: %s",
				s.CurrentTask().ID, s.ContextTokens, s.Limits.ContextWindow, d.Error), now)
		}
		return s.continueTask(nil, now)
	}
	if saved := d.TokensBefore - d.TokensAfter; saved > 0 {
		// Only a compaction that changed the context counts (and marks
		// the next record): a plan with nothing it may touch yet is not
		// one.
		s.Compactions++
		s.CompactedTokens += saved
		s.ContextTokens = d.TokensAfter
		s.JustCompacted = true
	}
	return s.continueTask(nil, now)
}

// intervene answers a stuck signal by climbing the ladder nudge -> prune ->
// decompose -> escalate, starting at the rung the detector recommends and
// skipping what was already tried on this task: the same intervention
// failed once, so it is not repeated. Decomposition is skipped at the
// maximum depth.
func (s State) intervene(sig events.Signal, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	s.Signal = &sig
	start := slices.Index(ladder, rungOf(sig.Action))
	for _, kind := range ladder[start:] {
		if kind == InterventionEscalate {
			break
		}
		if t.tried(kind) {
			continue
		}
		if kind == InterventionDecompose && t.Depth >= s.Limits.MaxDecomposeDepth {
			t.Interventions = append(t.Interventions, fmt.Sprintf("decompose:refused at depth %d (max %d)", t.Depth, s.Limits.MaxDecomposeDepth))
			continue
		}
		t.Interventions = append(t.Interventions, kind+":"+sig.Pattern)
		switch kind {
		case InterventionNudge:
			s.Signal = nil
			nudge := units.Unit{
				ID: fmt.Sprintf("nudge-%d", s.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
				Turn: t.Turns,
				Content: fmt.Sprintf("You appear to be stuck (%s, confidence %.2f): %s. "+
					"Do not repeat the same action. Step back, reconsider the acceptance criteria, and try a different approach.",
					sig.Pattern, sig.Confidence, sig.Diagnosis),
			}
			return s.continueTask(&Append{Scope: t.ID, Units: []units.Unit{nudge}}, now)
		case InterventionPrune:
			s.Phase = PhasePruning
			return s, []Command{s.publish(events.PruneRequested, events.PruneRequestedData{TaskID: t.ID, Signal: sig}, now)}, nil
		case InterventionDecompose:
			s.Phase = PhaseDecomposing
			taken := make([]string, len(s.Tasks))
			for i, o := range s.Tasks {
				taken[i] = o.ID
			}
			return s, []Command{s.publish(events.DecomposeRequested, events.DecomposeRequestedData{
				Task: t.Task, Signal: sig, Depth: t.Depth, MaxSubtasks: s.Limits.MaxSubtasks,
				Tried: slices.Clone(t.Interventions), TakenIDs: taken,
			}, now)}, nil
		}
	}
	return s.escalate(fmt.Sprintf("task %s stuck (%s): %s", t.ID, sig.Pattern, sig.Diagnosis), &sig, now)
}

func rungOf(a events.Action) string {
	switch a {
	case events.ActionPrune:
		return InterventionPrune
	case events.ActionDecompose:
		return InterventionDecompose
	case events.ActionEscalate:
		return InterventionEscalate
	}
	return InterventionNudge
}

// escalate pauses the session for a person, saying why and what was tried.
func (s State) escalate(reason string, sig *events.Signal, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	d := events.SessionEscalatedData{TaskID: t.ID, Reason: reason, Tried: slices.Clone(t.Interventions), Signal: sig}
	t.Interventions = append(t.Interventions, InterventionEscalate)
	s.Phase = PhaseEscalated
	s.Reason = reason
	s.Signal = nil
	if sig != nil {
		d.Diagnosis = sig.Diagnosis
	}
	return s, []Command{s.publish(events.SessionEscalated, d, now)}, nil
}

func (s State) pruned(ev Pruned, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	sig := s.Signal
	if ev.Data.Error != "" && sig != nil {
		// The context is unchanged: go on to the next intervention.
		t.Interventions = append(t.Interventions, "prune failed: "+ev.Data.Error)
		return s.intervene(*sig, now)
	}
	s.Signal = nil
	return s.continueTask(nil, now)
}

func (s State) decomposed(ev Decomposed, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	sig := s.Signal
	if ev.Data.Error != "" {
		return s.escalate(fmt.Sprintf("task %s is stuck and could not be decomposed: %s", t.ID, ev.Data.Error), sig, now)
	}
	// The decomposer checks the same rules; the builder owns the task
	// graph, so it does not take them on trust.
	if err := t.CheckSubtasks(ev.Data.Subtasks, s.Limits.MaxSubtasks, func(id string) bool { return s.taskIndex(id) >= 0 }); err != nil {
		return s.escalate(fmt.Sprintf("task %s is stuck and its decomposition was refused: %v", t.ID, err), sig, now)
	}
	s.Signal = nil
	parent := s.Current
	subs := make([]TaskState, len(ev.Data.Subtasks))
	ids := make([]string, len(ev.Data.Subtasks))
	for i, st := range ev.Data.Subtasks {
		st.ParentID = t.ID
		subs[i] = TaskState{Task: st, Status: TaskPending, Depth: t.Depth + 1}
		ids[i] = st.ID
	}
	t.Status = TaskPending
	t.Subtasks = ids
	t.DependsOn = append(slices.Clone(t.DependsOn), ids...)
	// The parent gets a fresh turn budget for its own review round.
	t.Turns = 0
	s.Tasks = slices.Insert(s.Tasks, parent, subs...)
	s.Current = -1
	return s, s.startNextTask(now), nil
}

func (s State) resumed(ev Resumed, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	if t == nil {
		return s, nil, fmt.Errorf("resume: %w: no task to resume", ErrNotEscalated)
	}
	t.Interventions = append(t.Interventions, "resumed")
	// A person's guidance starts a fresh turn budget for the task; the
	// ladder is not reset, so a task that gets stuck again is escalated
	// again rather than pruned or split a second time.
	t.Turns = 0
	t.Status = TaskActive
	s.Reason = ""
	guidance := units.Unit{
		ID: fmt.Sprintf("guidance-%d", s.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
		Turn: t.Turns,
		Content: "The session was paused because you were stuck; a person reviewed it and gives this guidance:\n" +
			ev.Data.Message + "\nFollow it, and do not repeat what did not work before.",
	}
	return s.continueTask(&Append{Scope: t.ID, Units: []units.Unit{guidance}}, now)
}

func (s State) critiqued(ev Critiqued, now time.Time) (State, []Command, error) {
	t := s.CurrentTask()
	if ev.Data.Error != "" {
		// Nobody can judge the work: a person decides (`ralph resume` sends
		// the task back to the builder, which claims it done again).
		t.Status = TaskActive
		return s.escalate(fmt.Sprintf("task %s could not be reviewed: %s", t.ID, ev.Data.Error), nil, now)
	}
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
	if reason := s.limitReached(); reason != "" {
		return s.fail(reason, now)
	}
	var cmds []Command
	if app != nil {
		cmds = append(cmds, Command{Append: app})
	}
	s.Step++
	s.Phase = PhaseIterating
	return s, append(cmds, s.publish(events.IterationRequested, events.IterationRequestedData{Iteration: s.Iteration + 1}, now)), nil
}

// limitReached says which limit stops the current task, if one does.
func (s *State) limitReached() string {
	t := s.CurrentTask()
	if t.Turns >= s.Limits.MaxTurnsPerTask {
		return fmt.Sprintf("task %s used all %d turns without being approved", t.ID, s.Limits.MaxTurnsPerTask)
	}
	if s.Iteration >= s.Limits.MaxIterations {
		return fmt.Sprintf("session reached max_iterations (%d)", s.Limits.MaxIterations)
	}
	return ""
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
				return []Command{s.publish(events.SessionFailed, events.SessionFailedData{Reason: s.Reason, Iterations: s.Iteration, Tokens: s.Tokens, Compactions: s.Compactions}, now)}
			}
		}
		s.Phase = PhaseCompleted
		return []Command{s.publish(events.SessionCompleted, events.SessionCompletedData{Tasks: len(s.Tasks), Iterations: s.Iteration, Tokens: s.Tokens,
			Compactions: s.Compactions, CompactedTokens: s.CompactedTokens}, now)}
	}
	s.Current = next
	t := &s.Tasks[next]
	s.Step++
	if len(t.Subtasks) > 0 {
		// Every subtask is done: the parent counts as done only when the
		// critic accepts its own criteria, so it goes straight to review.
		t.Status = TaskReview
		t.Attempts++
		s.Phase = PhaseReviewing
		t.Summary = s.subtaskSummary(*t)
		return []Command{s.publish(events.CritiqueRequested, events.CritiqueRequestedData{
			Task: t.Task, Workspace: s.Workspace, Summary: t.Summary,
			FilesChanged: t.FilesChanged, Attempt: t.Attempts,
		}, now)}
	}
	t.Status = TaskActive
	s.Phase = PhaseIterating
	initial := InitialContext(s.Workspace, t.Task)
	if p := s.taskIndex(t.ParentID); p >= 0 {
		initial = append(initial, units.Unit{
			ID: "parent-" + t.ID, Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
			Content: SubtaskContext(s.Tasks[p], t.ID),
		})
	}
	return []Command{
		s.publish(events.TaskStarted, events.TaskStartedData{Task: t.Task}, now),
		{Append: &Append{Scope: t.ID, Units: initial}},
		s.publish(events.IterationRequested, events.IterationRequestedData{Iteration: s.Iteration + 1}, now),
	}
}

// subtaskSummary is what the critic is told of a decomposed task: its
// subtasks, all approved, and the files they changed.
func (s *State) subtaskSummary(t TaskState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s was split into %d subtasks, each approved by the reviewer:\n", t.ID, len(t.Subtasks))
	for _, id := range t.Subtasks {
		if i := s.taskIndex(id); i >= 0 {
			st := s.Tasks[i]
			fmt.Fprintf(&b, "- %s: %s", st.ID, st.Title)
			if st.Summary != "" {
				fmt.Fprintf(&b, " (%s)", strings.TrimSpace(st.Summary))
			}
			b.WriteString("\n")
			for _, f := range st.FilesChanged {
				if !slices.Contains(t.FilesChanged, f) {
					t.FilesChanged = append(t.FilesChanged, f)
				}
			}
		}
	}
	b.WriteString("Review the parent task against its own acceptance criteria.")
	return b.String()
}

// SubtaskContext tells a subtask's builder where its work fits.
func SubtaskContext(parent TaskState, id string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s is one of the subtasks of task %s: %s.\n", id, parent.ID, parent.Title)
	fmt.Fprintf(&b, "The subtasks of %s are, in order: %s. Do only %s's part; the others are done separately.\n",
		parent.ID, strings.Join(parent.Subtasks, ", "), id)
	b.WriteString("The parent task's acceptance criteria, which the subtasks together must meet:\n")
	for _, c := range parent.AcceptanceCriteria {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	return b.String()
}

func (s State) fail(reason string, now time.Time) (State, []Command, error) {
	s.Phase = PhaseFailed
	s.Reason = reason
	return s, []Command{s.publish(events.SessionFailed, events.SessionFailedData{Reason: reason, Iterations: s.Iteration, Tokens: s.Tokens, Compactions: s.Compactions}, now)}, nil
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
