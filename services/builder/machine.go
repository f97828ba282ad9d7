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
	// PhaseCommitting: the critic approved the task; its commit (a
	// CommitPlan command) is being made, and its outcome (Committed) says
	// whether the task is done.
	PhaseCommitting Phase = "committing"
	PhaseCompleted  Phase = "completed"
	PhaseFailed     Phase = "failed"
	// PhaseEscalated pauses the session until a person resumes it.
	PhaseEscalated Phase = "escalated"
	// PhaseCancelled: a person stopped the session (cancel.go); it can be
	// resumed like an escalated one.
	PhaseCancelled Phase = "cancelled"
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
	// Base is the commit of the session's branch when the task began: the
	// critic reviews base..work tree, and a commit of the task already
	// made is looked for after it.
	Base string `json:"base,omitempty"`
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
	// Commit records an approved task in the session's branch; the shell
	// makes it at most once (the journal, then the commit's trailers) and
	// feeds its outcome back as Committed.
	Commit *CommitPlan `json:"commit,omitempty"`
}

// Append adds units to a task's context.
type Append struct {
	Scope string       `json:"scope"`
	Units []units.Unit `json:"units"`
	// Memory, on a task's first units, asks the shell to add the session's
	// memory after them: one unit, read from the store when the task
	// starts (the machine stays pure: what the memory says is no input).
	Memory *MemoryRequest `json:"memory,omitempty"`
}

// MemoryRequest says whose learnings a starting task's memory should hold:
// the tasks approved before it, which the shell waits for, up to
// RALPH_MEMORY_WAIT, before it reads the memory as it stands.
type MemoryRequest struct {
	After []string `json:"after,omitempty"`
}

// State is one session, kept in Redis under compare-and-set.
type State struct {
	Session string `json:"session"`
	// Team owns the session; every event the builder publishes for it is
	// the team's. Empty is events.DefaultTeam (states of before teams).
	Team      string        `json:"team,omitempty"`
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
	// Git is the session's branch and where it stands; nil for a session
	// without one.
	Git *GitState `json:"git,omitempty"`
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
	return s.Phase == PhaseCompleted || s.Phase == PhaseFailed || s.Phase == PhaseEscalated || s.Phase == PhaseCancelled
}

// ErrStale: the event belongs to a step or phase the session has left; it
// is a duplicate or a late redelivery.
var ErrStale = errors.New("stale event")

// Start creates the state of a new session of the default team from
// session.started, for a session without a branch (or a check that needs
// none).
func Start(session string, d events.SessionStartedData, defaults events.Limits, now time.Time) (State, []Command) {
	return StartAt("", session, d, defaults, GitStart{}, now)
}

// StartFor creates the state of a new session of team from
// session.started, for a session without a branch.
func StartFor(team, session string, d events.SessionStartedData, defaults events.Limits, now time.Time) (State, []Command) {
	return StartAt(team, session, d, defaults, GitStart{}, now)
}

// StartAt creates the state of a new session of team whose workspace the
// shell has put on the session's branch (at), when d asks for one.
func StartAt(team, session string, d events.SessionStartedData, defaults events.Limits, at GitStart, now time.Time) (State, []Command) {
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
	s := State{Session: session, Team: team, Workspace: d.Workspace, Limits: lim, Current: -1}
	if d.Git != nil {
		s.Git = &GitState{Git: *d.Git, Head: at.Head, PushDigest: at.PushDigest, Patterns: at.Patterns}
	}
	for _, t := range d.PRD.Tasks {
		s.Tasks = append(s.Tasks, TaskState{Task: t, Status: TaskPending})
	}
	cmds := s.startNextTask(now)
	return s, cmds
}

// Input is what the state machine consumes: one of IterationDone, Analyzed,
// Critiqued, Pruned, Decomposed, Compacted and Resumed, and the liveness
// inputs DeadLettered, TimedOut and Ended (liveness.go). The set is closed
// (isInput is unexported), so Next's switch covers every input the
// compiler lets a caller build.
type Input interface {
	isInput()
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
	// Measure sizes a subtask's first request (the shell has the
	// tokenizer): a decomposition with a subtask that cannot fit in the
	// model's window is refused. Nil measures nothing.
	Measure Measure
}

// Compacted is the summarizer's answer to the compaction requested at step
// Step.
type Compacted struct {
	Step int
	Data events.CompactionCompletedData
}

// Resumed is a person's guidance for the session escalated at step Step.
// Head is the tip of the session's branch the shell found the workspace
// on (a person may have committed while the session was paused); empty
// for a session without a branch.
type Resumed struct {
	Step int
	Data events.SessionResumedData
	Head string
}

func (IterationDone) isInput() {}
func (Committed) isInput()     {}
func (Analyzed) isInput()      {}
func (Critiqued) isInput()     {}
func (Pruned) isInput()        {}
func (Decomposed) isInput()    {}
func (Compacted) isInput()     {}
func (Resumed) isInput()       {}

// ErrNotEscalated: a resume for a session that is not paused.
var ErrNotEscalated = errors.New("session is not escalated")

// Next applies one input to the state. It is pure: the caller supplies the
// clock and performs the returned commands. The transition works on a deep
// copy of s, so the caller's state is never written to: a caller that keeps
// it (to retry after a lost compare-and-set, or to compare before and
// after) still has it as it was. On an error nothing is applied and s is
// returned as given.
func Next(s State, in Input, now time.Time) (State, []Command, error) {
	n := s.clone()
	cmds, err := n.apply(in, now)
	if err != nil {
		return s, nil, err
	}
	return n, cmds, nil
}

// apply dispatches in to its transition after checking that it belongs to
// the state's phase and step.
func (s *State) apply(in Input, now time.Time) ([]Command, error) {
	switch ev := in.(type) {
	case IterationDone:
		if s.Phase != PhaseIterating || ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.iterationDone(ev, now)
	case Analyzed:
		if s.Phase != PhaseAnalyzing || ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.analyzed(ev, now)
	case Critiqued:
		if s.Phase != PhaseReviewing || ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.critiqued(ev, now)
	case Pruned:
		if s.Phase != PhasePruning || ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.pruned(ev, now)
	case Decomposed:
		if s.Phase != PhaseDecomposing || ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.decomposed(ev, now)
	case Compacted:
		if s.Phase != PhaseCompacting || ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.compacted(ev, now)
	case Committed:
		if s.Phase != PhaseCommitting || ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.committed(ev, now)
	case DeadLettered:
		return s.deadLettered(ev, now)
	case TimedOut:
		return s.timedOut(ev, now)
	case Ended:
		return s.ended(ev, now)
	case Cancel:
		return s.cancel(ev, now)
	case LimitHit:
		return s.limitHit(ev, now)
	case Resumed:
		if s.Phase != PhaseEscalated && s.Phase != PhaseCancelled {
			if s.Step > ev.Step {
				// Resumed already: this is a redelivery.
				return nil, ErrStale
			}
			return nil, fmt.Errorf("resume at step %d: %w (phase %s)", ev.Step, ErrNotEscalated, s.Phase)
		}
		if ev.Step != s.Step {
			return nil, ErrStale
		}
		return s.resumed(ev, now)
	default:
		// Only a nil Input gets here: the set of inputs is closed.
		return nil, fmt.Errorf("builder: unknown input %T", in)
	}
}

// clone copies s deeply enough that no write to the copy shows in s: the
// task list and every slice of every task, and the signal. Appending to a
// shared slice with spare capacity would otherwise write into the backing
// array the caller's state still uses.
func (s *State) clone() State {
	c := *s
	c.Tasks = make([]TaskState, len(s.Tasks))
	for i := range s.Tasks {
		c.Tasks[i] = s.Tasks[i].clone()
	}
	if s.Signal != nil {
		sig := *s.Signal
		sig.Evidence = slices.Clone(sig.Evidence)
		c.Signal = &sig
	}
	// Transitions replace Pending rather than edit it, and a command is
	// never changed once built; copying the list is enough.
	c.Pending = slices.Clone(s.Pending)
	if s.Git != nil {
		g := *s.Git
		g.Commits = slices.Clone(g.Commits)
		c.Git = &g
	}
	return c
}

// clone copies the task with its own copies of every slice.
func (t *TaskState) clone() TaskState {
	c := *t
	c.AcceptanceCriteria = slices.Clone(t.AcceptanceCriteria)
	c.DependsOn = slices.Clone(t.DependsOn)
	c.Interventions = slices.Clone(t.Interventions)
	c.FilesChanged = slices.Clone(t.FilesChanged)
	c.Subtasks = slices.Clone(t.Subtasks)
	return c
}

func (s *State) iterationDone(ev IterationDone, now time.Time) ([]Command, error) {
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
	return []Command{s.publish(events.IterationCompleted, rec, now)}, nil
}

func (s *State) analyzed(ev Analyzed, now time.Time) ([]Command, error) {
	t := s.CurrentTask()
	if reason := s.budgetSpent(); reason != "" {
		return s.fail(reason, now)
	}
	if sig := ev.Data.Signal; sig != nil {
		return s.intervene(*sig, now)
	}
	if ev.Data.ClaimedDone {
		// A claim made within the limits is reviewed even when it used the
		// last turn: the review judges work already done.
		t.Status = TaskReview
		t.Attempts++
		s.Phase = PhaseReviewing
		return []Command{s.publish(events.CritiqueRequested, events.CritiqueRequestedData{
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
		return []Command{s.publish(events.CompactionRequested, events.CompactionRequestedData{
			TaskID: t.ID, Goal: t.ID + ": " + t.Title, ContextTokens: s.ContextTokens, LimitTokens: s.Limits.ContextWindow,
			Iteration: s.Iteration, Turn: t.Turns, FilesChanged: slices.Clone(t.FilesChanged),
		}, now)}, nil
	}
	return s.continueTask(nil, now)
}

// compacted goes on with the compacted context. A failed compaction is
// survivable while the context still fits the model's window: the next
// step's compaction may succeed; past the window it is not.
func (s *State) compacted(ev Compacted, now time.Time) ([]Command, error) {
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
func (s *State) intervene(sig events.Signal, now time.Time) ([]Command, error) {
	t := s.CurrentTask()
	// Every rung but escalation is more work on the task (a model call, an
	// iteration); past a limit the session ends instead.
	if reason := s.limitReached(); reason != "" {
		return s.fail(reason, now)
	}
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
			return []Command{s.publish(events.PruneRequested, events.PruneRequestedData{TaskID: t.ID, Signal: sig}, now)}, nil
		case InterventionDecompose:
			s.Phase = PhaseDecomposing
			taken := make([]string, len(s.Tasks))
			for i, o := range s.Tasks {
				taken[i] = o.ID
			}
			return []Command{s.publish(events.DecomposeRequested, events.DecomposeRequestedData{
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
func (s *State) escalate(reason string, sig *events.Signal, now time.Time) ([]Command, error) {
	t := s.CurrentTask()
	d := events.SessionEscalatedData{TaskID: t.ID, Reason: reason, Tried: slices.Clone(t.Interventions), Signal: sig}
	t.Interventions = append(t.Interventions, InterventionEscalate)
	s.Phase = PhaseEscalated
	s.Reason = reason
	s.Signal = nil
	if sig != nil {
		d.Diagnosis = sig.Diagnosis
	}
	return []Command{s.publish(events.SessionEscalated, d, now)}, nil
}

func (s *State) pruned(ev Pruned, now time.Time) ([]Command, error) {
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

func (s *State) decomposed(ev Decomposed, now time.Time) ([]Command, error) {
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
	parent := s.Current
	subs := make([]TaskState, len(ev.Data.Subtasks))
	ids := make([]string, len(ev.Data.Subtasks))
	for i, st := range ev.Data.Subtasks {
		st.ParentID = t.ID
		subs[i] = TaskState{Task: st, Status: TaskPending, Depth: t.Depth + 1}
		ids[i] = st.ID
	}
	// Each subtask is measured as it will start: with its parent's context,
	// which names all the subtasks.
	planned := s.clone()
	planned.Tasks[parent].Subtasks = ids
	planned.Tasks = slices.Insert(planned.Tasks, parent, subs...)
	for _, st := range subs {
		if reason := planned.unfit(st, ev.Measure); reason != "" {
			return s.escalate(fmt.Sprintf("task %s is stuck and its decomposition was refused: %s", t.ID, reason), sig, now)
		}
	}
	s.Signal = nil
	t.Status = TaskPending
	t.Subtasks = ids
	t.DependsOn = append(slices.Clone(t.DependsOn), ids...)
	// The parent gets a fresh turn budget for its own review round.
	t.Turns = 0
	s.Tasks = slices.Insert(s.Tasks, parent, subs...)
	s.Current = -1
	return s.startNextTask(now), nil
}

func (s *State) resumed(ev Resumed, now time.Time) ([]Command, error) {
	t := s.CurrentTask()
	if t == nil && s.Phase == PhaseCancelled {
		// Cancelled between two tasks: go on with the next.
		s.Reason = ""
		return s.startNextTask(now), nil
	}
	if t == nil {
		return nil, fmt.Errorf("resume: %w: no task to resume", ErrNotEscalated)
	}
	why := "The session was paused because you were stuck; a person reviewed it and gives this guidance:\n"
	if s.Phase == PhaseCancelled {
		why = "A person stopped the session while you worked on this task and now resumes it with this guidance:\n"
	}
	t.Interventions = append(t.Interventions, "resumed")
	if s.Git != nil && ev.Head != "" {
		s.Git.Head = ev.Head
	}
	// A person's guidance starts a fresh turn budget for the task; the
	// ladder is not reset, so a task that gets stuck again is escalated
	// again rather than pruned or split a second time.
	t.Turns = 0
	t.Status = TaskActive
	s.Reason = ""
	guidance := units.Unit{
		ID: fmt.Sprintf("guidance-%d", s.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
		Turn:    t.Turns,
		Content: why + ev.Data.Message + "\nFollow it, and do not repeat what did not work before.",
	}
	return s.continueTask(&Append{Scope: t.ID, Units: []units.Unit{guidance}}, now)
}

func (s *State) critiqued(ev Critiqued, now time.Time) ([]Command, error) {
	t := s.CurrentTask()
	if ev.Data.Error != "" {
		// Nobody can judge the work: a person decides (`ralph resume` sends
		// the task back to the builder, which claims it done again).
		t.Status = TaskActive
		return s.escalate(fmt.Sprintf("task %s could not be reviewed: %s", t.ID, ev.Data.Error), nil, now)
	}
	v := ev.Data.Verdict
	if v.Approved {
		if s.Git != nil {
			// Done only once committed: a hook may still refuse the work.
			s.Phase = PhaseCommitting
			return []Command{{Commit: s.commitPlan(t, ev.Data)}}, nil
		}
		return s.taskDone(nil, now), nil
	}
	t.Status = TaskActive
	return s.continueTask(&Append{Scope: t.ID, Units: []units.Unit{{
		ID: fmt.Sprintf("critique-%d", s.Step), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
		Turn: t.Turns, Content: RejectionMessage(ev.Data),
	}}}, now)
}

// continueTask requests the next iteration of the current task unless a
// limit says stop.
func (s *State) continueTask(app *Append, now time.Time) ([]Command, error) {
	if reason := s.limitReached(); reason != "" {
		return s.fail(reason, now)
	}
	var cmds []Command
	if app != nil {
		cmds = append(cmds, Command{Append: app})
	}
	s.Step++
	s.Phase = PhaseIterating
	return append(cmds, s.publish(events.IterationRequested, events.IterationRequestedData{Iteration: s.Iteration + 1}, now)), nil
}

// The limits and what they stop. Every transition that starts or continues
// work checks them before it does: an iteration (continueTask, and
// startNextTask for a task's first), a prune or a decomposition
// (intervene), a compaction (analyzed). A review is stopped by the token
// budget alone: it judges work done within the turn and iteration limits,
// so a task that claims done on its last turn is still reviewed.

// limitReached says which limit stops work on the current task, if one
// does: the session's token budget, the task's turns, the session's
// iterations. Before the first task starts there is no task and no turn
// to count.
func (s *State) limitReached() string {
	if reason := s.budgetSpent(); reason != "" {
		return reason
	}
	if t := s.CurrentTask(); t != nil && t.Turns >= s.Limits.MaxTurnsPerTask {
		return fmt.Sprintf("task %s used all %d turns without being approved", t.ID, s.Limits.MaxTurnsPerTask)
	}
	return s.iterationsSpent()
}

// sessionLimitReached is limitReached for a task about to start: the
// session's limits only.
func (s *State) sessionLimitReached() string {
	if reason := s.budgetSpent(); reason != "" {
		return reason
	}
	return s.iterationsSpent()
}

// iterationsSpent says whether the session used all its iterations.
func (s *State) iterationsSpent() string {
	if s.Iteration >= s.Limits.MaxIterations {
		return fmt.Sprintf("session reached max_iterations (%d)", s.Limits.MaxIterations)
	}
	return ""
}

// budgetSpent says whether the session's token budget is spent, which stops
// everything that calls a model.
func (s *State) budgetSpent() string {
	if s.Tokens >= s.Limits.MaxTotalTokens {
		return fmt.Sprintf("token budget exhausted: %d of %d tokens used", s.Tokens, s.Limits.MaxTotalTokens)
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
		done := events.SessionCompletedData{Tasks: len(s.Tasks), Iterations: s.Iteration, Tokens: s.Tokens,
			Compactions: s.Compactions, CompactedTokens: s.CompactedTokens}
		if s.Git != nil {
			done.Branch, done.Commits = s.Git.Branch, slices.Clone(s.Git.Commits)
		}
		return []Command{s.publish(events.SessionCompleted, done, now)}
	}
	// The limits are the session's, checked with the task that finished
	// (or none) still current: a new task's turns start at zero, and an
	// approval is no licence to go past max_iterations.
	if len(s.Tasks[next].Subtasks) > 0 {
		if reason := s.budgetSpent(); reason != "" {
			cmds, _ := s.fail(reason, now)
			return cmds
		}
	} else if reason := s.sessionLimitReached(); reason != "" {
		cmds, _ := s.fail(reason, now)
		return cmds
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
		// The critic judges the parent by what its subtasks wrote: their
		// files become the parent's before the request is built.
		s.collectSubtaskFiles(t)
		t.Summary = s.subtaskSummary(t)
		return []Command{s.publish(events.CritiqueRequested, events.CritiqueRequestedData{
			Task: t.Task, Workspace: s.Workspace, Summary: t.Summary,
			FilesChanged: t.FilesChanged, Attempt: t.Attempts,
		}, now)}
	}
	t.Status = TaskActive
	s.Phase = PhaseIterating
	if s.Git != nil && t.Base == "" {
		t.Base = s.Git.Head
	}
	return []Command{
		s.publish(events.TaskStarted, events.TaskStartedData{Task: t.Task}, now),
		{Append: &Append{Scope: t.ID, Units: s.instructions(*t), Memory: &MemoryRequest{After: s.doneTasks()}}},
		s.publish(events.IterationRequested, events.IterationRequestedData{Iteration: s.Iteration + 1}, now),
	}
}

// instructions are the units task t starts with: the system prompt and the
// task, and for a subtask its place in its parent's work.
func (s *State) instructions(t TaskState) []units.Unit {
	us := InitialContext(s.Workspace, t.Task)
	if s.Git != nil && s.Git.Patterns != "" {
		// What earlier tasks learned of the codebase, read right after the
		// task and before any work (the task stays the first user
		// message).
		us = append(us, PatternsUnit(t.ID, s.Git.Patterns))
	}
	if p := s.taskIndex(t.ParentID); p >= 0 {
		us = append(us, units.Unit{
			ID: "parent-" + t.ID, Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
			Content: SubtaskContext(s.Tasks[p], t.ID),
		})
	}
	return us
}

// doneTasks are the ids of the tasks approved so far, in task order.
func (s *State) doneTasks() []string {
	var ids []string
	for _, t := range s.Tasks {
		if t.Status == TaskDone {
			ids = append(ids, t.ID)
		}
	}
	return ids
}

// collectSubtaskFiles adds the files t's subtasks changed to t's own, in
// subtask order, each once.
func (s *State) collectSubtaskFiles(t *TaskState) {
	for _, id := range t.Subtasks {
		if i := s.taskIndex(id); i >= 0 {
			for _, f := range s.Tasks[i].FilesChanged {
				if !slices.Contains(t.FilesChanged, f) {
					t.FilesChanged = append(t.FilesChanged, f)
				}
			}
		}
	}
}

// subtaskSummary is what the critic is told of a decomposed task: its
// subtasks, all approved.
func (s *State) subtaskSummary(t *TaskState) string {
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

func (s *State) fail(reason string, now time.Time) ([]Command, error) {
	s.Phase = PhaseFailed
	s.Reason = reason
	return []Command{s.publish(events.SessionFailed, events.SessionFailedData{Reason: reason, Iterations: s.Iteration, Tokens: s.Tokens, Compactions: s.Compactions}, now)}, nil
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
	env := events.Must(typ, s.Session, task, s.Step, now, payload).For(s.Team)
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
When the task is complete and every acceptance criterion is met, reply with no tool calls: a short summary
of what you did and, under a line "Learnings:", what a later task in this codebase should know, one "- "
line each (a codebase-wide convention as "- Pattern: ..."; gotchas; commands that work). That reply hands
the task to the reviewer.`
