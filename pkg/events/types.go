package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/ralphmesh/ralph/pkg/gitref"
	"github.com/ralphmesh/ralph/pkg/prd"
)

// Type names an event. The catalogue is docs/REFERENCE.md, "Events".
type Type string

const (
	SessionStarted   Type = "session.started"
	SessionCompleted Type = "session.completed"
	SessionFailed    Type = "session.failed"
	SessionEscalated Type = "session.escalated"
	SessionResumed   Type = "session.resumed"
	// CancelRequested is a person asking to stop a session (ralph cancel,
	// the API); SessionCancelled is the builder saying it stopped.
	CancelRequested     Type = "cancel.requested"
	SessionCancelled    Type = "session.cancelled"
	TaskStarted         Type = "task.started"
	TaskCompleted       Type = "task.completed"
	TaskDecomposed      Type = "task.decomposed"
	IterationRequested  Type = "iteration.requested"
	IterationCompleted  Type = "iteration.completed"
	IterationAnalyzed   Type = "iteration.analyzed"
	CritiqueRequested   Type = "critique.requested"
	CritiqueCompleted   Type = "critique.completed"
	PruneRequested      Type = "prune.requested"
	PruneCompleted      Type = "prune.completed"
	DecomposeRequested  Type = "decompose.requested"
	CompactionRequested Type = "compaction.requested"
	CompactionCompleted Type = "compaction.completed"
	MemoryUpdated       Type = "memory.updated"
)

// AllTypes lists the catalogue in flow order.
var AllTypes = []Type{
	SessionStarted, TaskStarted, IterationRequested, IterationCompleted, IterationAnalyzed,
	CritiqueRequested, CritiqueCompleted, PruneRequested, PruneCompleted,
	DecomposeRequested, TaskDecomposed, CompactionRequested, CompactionCompleted,
	TaskCompleted, MemoryUpdated, SessionCompleted, SessionFailed, SessionEscalated, SessionResumed,
	CancelRequested, SessionCancelled,
}

// Known reports whether t is in the catalogue.
func (t Type) Known() bool {
	for _, k := range AllTypes {
		if k == t {
			return true
		}
	}
	return false
}

// Terminal reports whether t ends a session (until a resume).
func (t Type) Terminal() bool {
	return t == SessionCompleted || t == SessionFailed || t == SessionEscalated || t == SessionCancelled
}

// Limits bound a session. Zero means the service default applies.
type Limits struct {
	MaxTurnsPerTask int `json:"max_turns_per_task"`
	MaxIterations   int `json:"max_iterations"`
	MaxTotalTokens  int `json:"max_total_tokens"`
	// MaxDecomposeDepth bounds how deep subtasks may nest: a task at this
	// depth is not decomposed again.
	MaxDecomposeDepth int `json:"max_decompose_depth,omitempty"`
	// MaxSubtasks bounds how many subtasks one decomposition may create.
	MaxSubtasks int `json:"max_subtasks,omitempty"`
	// ContextWindow is the builder model's window in tokens; CompactAt is
	// the context size at which the builder asks for compaction (0: never).
	ContextWindow int `json:"context_window,omitempty"`
	CompactAt     int `json:"compact_at,omitempty"`
}

// SessionStartedData is the payload of session.started.
type SessionStartedData struct {
	PRD       prd.PRD `json:"prd"`
	Workspace string  `json:"workspace"`
	Limits    Limits  `json:"limits"`
	// Git makes the session's work product a branch of the workspace's
	// repository with one commit per approved task. Without it (a
	// publisher that is not `ralph run`) tasks are approved without
	// commits.
	Git *Git `json:"git,omitempty"`
}

// Git is where a session's work goes: a branch of the repository the
// workspace is the top level of, created from HEAD or continued.
type Git struct {
	Branch string `json:"branch"`
	// PRDFile is the path, relative to the workspace, of the Ralph
	// prd.json the session runs: when a story is approved its passes
	// becomes true there, in the same commit as the work.
	PRDFile string `json:"prd_file,omitempty"`
	// Push names the remote each commit is pushed to; empty, nothing is
	// pushed.
	Push string `json:"push,omitempty"`
}

func (g Git) Validate() error {
	if err := gitref.ValidBranch(g.Branch); err != nil {
		return fmt.Errorf("field git.branch: %w", err)
	}
	if g.PRDFile != "" {
		if path.IsAbs(g.PRDFile) || path.Clean(g.PRDFile) != g.PRDFile || g.PRDFile == ".." || strings.HasPrefix(g.PRDFile, "../") {
			return fmt.Errorf("field git.prd_file: %q must be a clean path inside the workspace", g.PRDFile)
		}
	}
	if g.Push != "" {
		if err := gitref.ValidRemote(g.Push); err != nil {
			return fmt.Errorf("field git.push: %w", err)
		}
	}
	return nil
}

// Commit is one commit a session made: an approved task's work.
type Commit struct {
	TaskID  string `json:"task_id"`
	SHA     string `json:"sha"`
	Subject string `json:"subject"`
	// PushError says why the commit could not be pushed, when a push was
	// asked for (the commit is made all the same).
	Pushed    bool   `json:"pushed,omitempty"`
	PushError string `json:"push_error,omitempty"`
}

// Short is the commit's abbreviated id.
func (c Commit) Short() string { return c.SHA[:min(len(c.SHA), 7)] }

func (d SessionStartedData) Validate() error {
	if d.Workspace == "" {
		return errors.New("field workspace: required")
	}
	if !strings.HasPrefix(d.Workspace, "/") {
		return fmt.Errorf("field workspace: %q must be an absolute path", d.Workspace)
	}
	if d.Limits.MaxTurnsPerTask < 0 || d.Limits.MaxIterations < 0 || d.Limits.MaxTotalTokens < 0 ||
		d.Limits.MaxDecomposeDepth < 0 || d.Limits.MaxSubtasks < 0 || d.Limits.ContextWindow < 0 || d.Limits.CompactAt < 0 {
		return errors.New("field limits: negative limit")
	}
	if d.Git != nil {
		if err := d.Git.Validate(); err != nil {
			return err
		}
	}
	return d.PRD.Validate()
}

// TaskStartedData is the payload of task.started.
type TaskStartedData struct {
	Task prd.Task `json:"task"`
}

func (d TaskStartedData) Validate() error { return d.Task.Validate() }

// TaskCompletedData is the payload of task.completed. Commit is the
// commit that records the task's work, when the session has a branch and
// there was something to commit.
type TaskCompletedData struct {
	TaskID     string  `json:"task_id"`
	Iterations int     `json:"iterations"`
	Attempts   int     `json:"attempts"`
	Commit     *Commit `json:"commit,omitempty"`
}

// MemoryUpdatedData is the payload of memory.updated: what the summarizer
// took into the session's memory from a task the reviewer approved. Nobody
// acts on it (a starting task reads the memory from the store); it tells
// people, and `ralph memory bench`, what memory cost and holds.
type MemoryUpdatedData struct {
	TaskID string `json:"task_id"`
	// How is how the task's learnings were extracted: "llm",
	// "extractive" (the model failed or ran out of time), or "already"
	// (the memory held them: a redelivered task.completed).
	How string `json:"how"`
	// Notes is how many notes the task added, beyond what the memory
	// already said.
	Notes int `json:"notes"`
	// Tokens is the memory's size after the update, MaxTokens its bound.
	Tokens    int `json:"tokens"`
	MaxTokens int `json:"max_tokens"`
	// Tasks is how many tasks' learnings the memory holds.
	Tasks int `json:"tasks"`
	// Resummarized says how the memory was summarised again because it
	// outgrew its bound ("llm" or "extractive"); empty when it was not.
	Resummarized string `json:"resummarized,omitempty"`
	LLMCalls     int    `json:"llm_calls"`
	ElapsedMS    int64  `json:"elapsed_ms"`
	// Error says why the memory could not be updated: it is as it was.
	Error string `json:"error,omitempty"`
}

func (d MemoryUpdatedData) Validate() error {
	if d.TaskID == "" {
		return errors.New("field task_id: required")
	}
	if d.Tokens < 0 || d.MaxTokens < 0 || d.Notes < 0 || d.Tasks < 0 {
		return errors.New("field tokens, max_tokens, notes or tasks: negative")
	}
	return nil
}

// IterationRequestedData is the payload of iteration.requested.
type IterationRequestedData struct {
	Iteration int `json:"iteration"`
}

// ToolCall is one tool call of an iteration with its outcome.
type ToolCall struct {
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name"`
	Args     json.RawMessage `json:"args,omitempty"`
	Output   string          `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	ExitCode int             `json:"exit_code"`
	// Artifact is set when Output is not the whole output: the output was
	// larger than a tool result is shown inline, or the record had to be
	// made smaller to fit in an event, and it is kept whole as this
	// artifact. Output is then its pointer (tools.PointerDigest, or the
	// pointer line alone), the same for the same output, since the id is
	// content-addressed.
	Artifact string `json:"artifact,omitempty"`
}

// TestResult is what an iteration's test run reported, when it ran tests.
type TestResult struct {
	Passed  int      `json:"passed"`
	Failed  int      `json:"failed"`
	Failing []string `json:"failing,omitempty"`
}

// Usage is token usage of one LLM call.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// IterationRecord is the payload of iteration.completed and one line of
// `ralph stuck scan` input (docs/REFERENCE.md, "IterationRecord"). Every field but Iteration may be
// empty.
type IterationRecord struct {
	Iteration     int         `json:"iteration"`
	TaskID        string      `json:"task_id,omitempty"`
	AssistantText string      `json:"assistant_text,omitempty"`
	ToolCalls     []ToolCall  `json:"tool_calls,omitempty"`
	FilesChanged  []string    `json:"files_changed,omitempty"`
	WorkspaceHash string      `json:"workspace_hash,omitempty"`
	Tests         *TestResult `json:"tests,omitempty"`
	Usage         Usage       `json:"usage"`
	ContextTokens int         `json:"context_tokens,omitempty"`
	Compacted     bool        `json:"compacted,omitempty"`
	// ClaimedDone is set when the model ended its turn without tool calls:
	// it says the task is done and the critic should review it.
	ClaimedDone bool `json:"claimed_done,omitempty"`
}

func (r IterationRecord) Validate() error {
	if r.Iteration < 1 {
		return fmt.Errorf("field iteration: must be >= 1, got %d", r.Iteration)
	}
	for i, c := range r.ToolCalls {
		if c.Name == "" {
			return fmt.Errorf("field tool_calls[%d].name: required", i)
		}
	}
	return nil
}

// Action is what the stuck detector recommends.
type Action string

const (
	ActionPrune     Action = "prune_context"
	ActionDecompose Action = "decompose_task"
	ActionNudge     Action = "nudge"
	ActionEscalate  Action = "escalate"
)

// Known reports whether a is one of the four actions.
func (a Action) Known() bool {
	return a == ActionPrune || a == ActionDecompose || a == ActionNudge || a == ActionEscalate
}

// Strength is how much evidence a stuck signal rests on. The detector
// grades it, and the action follows: weak evidence is answered with a
// nudge, strong evidence with the pattern's own remedy.
type Strength string

const (
	// StrengthWeak: the pattern's threshold was just reached (three
	// identical calls, two compactions in a row). A coincidence or a
	// re-check is still possible, so the detector recommends a nudge and
	// keeps the evidence, which grows if the nudge changes nothing.
	StrengthWeak Strength = "weak"
	// StrengthStrong: the evidence went past the threshold (four or more
	// repeats, a loop that went on after the nudge).
	StrengthStrong Strength = "strong"
)

// Known reports whether s is one of the two strengths.
func (s Strength) Known() bool { return s == StrengthWeak || s == StrengthStrong }

// Signal is a detected stuck pattern.
type Signal struct {
	Iteration  int     `json:"iteration"`
	Pattern    string  `json:"pattern"`
	Confidence float64 `json:"confidence"`
	Action     Action  `json:"action"`
	Diagnosis  string  `json:"diagnosis"`
	// Evidence lists the iterations the pattern was seen in.
	Evidence []int `json:"evidence,omitempty"`
	// Strength grades the evidence; empty from producers that do not
	// grade (signals recorded before it existed).
	Strength Strength `json:"strength,omitempty"`
}

func (s Signal) Validate() error {
	switch {
	case s.Pattern == "":
		return errors.New("field pattern: required")
	case s.Confidence < 0 || s.Confidence > 1:
		return fmt.Errorf("field confidence: %v not in [0,1]", s.Confidence)
	case !s.Action.Known():
		return fmt.Errorf("field action: unknown action %q", s.Action)
	case s.Strength != "" && !s.Strength.Known():
		return fmt.Errorf("field strength: must be %q or %q, got %q", StrengthWeak, StrengthStrong, s.Strength)
	}
	return nil
}

// IterationAnalyzedData is the payload of iteration.analyzed. Signal is nil
// when the iteration looked healthy.
type IterationAnalyzedData struct {
	Iteration   int     `json:"iteration"`
	Signal      *Signal `json:"signal,omitempty"`
	ClaimedDone bool    `json:"claimed_done,omitempty"`
}

func (d IterationAnalyzedData) Validate() error {
	if d.Signal != nil {
		return d.Signal.Validate()
	}
	return nil
}

// CritiqueRequestedData is the payload of critique.requested.
type CritiqueRequestedData struct {
	Task         prd.Task `json:"task"`
	Workspace    string   `json:"workspace"`
	Summary      string   `json:"summary,omitempty"`
	FilesChanged []string `json:"files_changed,omitempty"`
	Attempt      int      `json:"attempt"`
}

func (d CritiqueRequestedData) Validate() error {
	if d.Workspace == "" {
		return errors.New("field workspace: required")
	}
	return d.Task.Validate()
}

// Verdict is the critic's decision.
type Verdict struct {
	Approved      bool     `json:"approved"`
	Feedback      string   `json:"feedback"`
	UnmetCriteria []string `json:"unmet_criteria,omitempty"`
}

// VerifyResult is the outcome of a task's verify command.
type VerifyResult struct {
	Command  string `json:"command"`
	ExitCode int    `json:"exit_code"`
	Output   string `json:"output,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// CritiqueCompletedData is the payload of critique.completed. Error is set
// when no verdict could be had (the critic model stayed unavailable); the
// builder then escalates rather than treat it as a rejection.
type CritiqueCompletedData struct {
	TaskID  string        `json:"task_id"`
	Attempt int           `json:"attempt"`
	Verdict Verdict       `json:"verdict"`
	Verify  *VerifyResult `json:"verify,omitempty"`
	Error   string        `json:"error,omitempty"`
}

func (d CritiqueCompletedData) Validate() error {
	if d.TaskID == "" {
		return errors.New("field task_id: required")
	}
	return nil
}

// PruneRequestedData is the payload of prune.requested.
type PruneRequestedData struct {
	TaskID string `json:"task_id"`
	Signal Signal `json:"signal"`
}

// PruneCompletedData is the payload of prune.completed. Error is set when
// the pruner could not prune (the context is then unchanged), so the builder
// moves on to its next intervention instead of waiting.
type PruneCompletedData struct {
	TaskID         string   `json:"task_id"`
	RemovedUnits   []string `json:"removed_units,omitempty"`
	KeptUnits      []string `json:"kept_units,omitempty"`
	TokensBefore   int      `json:"tokens_before"`
	TokensAfter    int      `json:"tokens_after"`
	ContextVersion int64    `json:"context_version"`
	LLMCalls       int      `json:"llm_calls"`
	// Fallback says the note on what was removed was extracted without the
	// pruner model (it was unavailable).
	Fallback bool   `json:"fallback,omitempty"`
	Error    string `json:"error,omitempty"`
}

func (d PruneCompletedData) Validate() error {
	if d.TaskID == "" {
		return errors.New("field task_id: required")
	}
	return nil
}

// DecomposeRequestedData is the payload of decompose.requested. Depth is the
// task's own depth (0 for a PRD task); TakenIDs are the session's task ids,
// which subtask ids must not reuse.
type DecomposeRequestedData struct {
	Task        prd.Task `json:"task"`
	Signal      Signal   `json:"signal"`
	Depth       int      `json:"depth"`
	MaxSubtasks int      `json:"max_subtasks,omitempty"`
	Tried       []string `json:"tried,omitempty"`
	TakenIDs    []string `json:"taken_ids,omitempty"`
}

func (d DecomposeRequestedData) Validate() error {
	if d.Depth < 0 {
		return fmt.Errorf("field depth: must be >= 0, got %d", d.Depth)
	}
	return d.Task.Validate()
}

// TaskDecomposedData is the payload of task.decomposed. Error is set, and
// Subtasks empty, when no valid decomposition could be had; the builder
// then escalates with it as the reason.
type TaskDecomposedData struct {
	ParentID string     `json:"parent_id"`
	Subtasks []prd.Task `json:"subtasks,omitempty"`
	LLMCalls int        `json:"llm_calls"`
	Error    string     `json:"error,omitempty"`
}

func (d TaskDecomposedData) Validate() error {
	if d.ParentID == "" {
		return errors.New("field parent_id: required")
	}
	if d.Error == "" && len(d.Subtasks) == 0 {
		return errors.New("field subtasks: required unless error is set")
	}
	for i, t := range d.Subtasks {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("field subtasks[%d]: %w", i, err)
		}
	}
	return nil
}

// CompactionRequestedData is the payload of compaction.requested.
// FilesChanged are the task's modified files, which every summary must
// still name.
type CompactionRequestedData struct {
	TaskID        string   `json:"task_id"`
	Goal          string   `json:"goal,omitempty"`
	ContextTokens int      `json:"context_tokens"`
	LimitTokens   int      `json:"limit_tokens"`
	Iteration     int      `json:"iteration"`
	Turn          int      `json:"turn"`
	FilesChanged  []string `json:"files_changed,omitempty"`
}

func (d CompactionRequestedData) Validate() error {
	if d.TaskID == "" {
		return errors.New("field task_id: required")
	}
	if d.LimitTokens < 1 {
		return fmt.Errorf("field limit_tokens: must be >= 1, got %d", d.LimitTokens)
	}
	return nil
}

// CompactionOp is one operation of a compaction as planned and as applied.
type CompactionOp struct {
	Unit         string `json:"unit"`
	Op           string `json:"op"`
	Lane         string `json:"lane,omitempty"`
	TokensBefore int    `json:"tokens_before,omitempty"`
	TokensAfter  int    `json:"tokens_after,omitempty"`
	// How: "llm", "cache", "pointer" or "extractive" (the model was
	// unavailable).
	How string `json:"how,omitempty"`
}

// CompactionSkip is a unit the planner left alone, with its reason.
type CompactionSkip struct {
	Unit   string `json:"unit"`
	Reason string `json:"reason"`
}

// CompactionCompletedData is the payload of compaction.completed: what was
// planned, applied and skipped, and what it cost. Error is set when the
// context could not be compacted (it is then unchanged).
type CompactionCompletedData struct {
	TaskID       string           `json:"task_id"`
	Mode         string           `json:"mode,omitempty"`
	Tier         string           `json:"tier,omitempty"`
	TokensBefore int              `json:"tokens_before"`
	TokensAfter  int              `json:"tokens_after"`
	TargetTokens int              `json:"target_tokens,omitempty"`
	Planned      []CompactionOp   `json:"planned,omitempty"`
	Applied      []CompactionOp   `json:"applied,omitempty"`
	Skipped      []CompactionSkip `json:"skipped,omitempty"`
	LLMCalls     int              `json:"llm_calls"`
	CacheHits    int              `json:"cache_hits"`
	ElapsedMS    int64            `json:"elapsed_ms"`
	Error        string           `json:"error,omitempty"`
}

func (d CompactionCompletedData) Validate() error {
	if d.TaskID == "" {
		return errors.New("field task_id: required")
	}
	return nil
}

// SessionCompletedData is the payload of session.completed. Branch and
// Commits are the session's work product, oldest commit first.
type SessionCompletedData struct {
	Tasks           int      `json:"tasks"`
	Iterations      int      `json:"iterations"`
	Tokens          int      `json:"tokens"`
	Compactions     int      `json:"compactions,omitempty"`
	CompactedTokens int      `json:"compacted_tokens,omitempty"`
	Branch          string   `json:"branch,omitempty"`
	Commits         []Commit `json:"commits,omitempty"`
}

// SessionFailedData is the payload of session.failed.
type SessionFailedData struct {
	Reason      string `json:"reason"`
	Iterations  int    `json:"iterations"`
	Tokens      int    `json:"tokens"`
	Compactions int    `json:"compactions,omitempty"`
}

func (d SessionFailedData) Validate() error {
	if d.Reason == "" {
		return errors.New("field reason: required")
	}
	return nil
}

// SessionEscalatedData is the payload of session.escalated.
type SessionEscalatedData struct {
	TaskID    string   `json:"task_id"`
	Reason    string   `json:"reason"`
	Diagnosis string   `json:"diagnosis,omitempty"`
	Tried     []string `json:"tried,omitempty"`
	Signal    *Signal  `json:"signal,omitempty"`
}

func (d SessionEscalatedData) Validate() error {
	if d.Reason == "" {
		return errors.New("field reason: required")
	}
	return nil
}

// SessionResumedData is the payload of session.resumed: a person's guidance
// for an escalated session.
type SessionResumedData struct {
	Message string `json:"message"`
}

func (d SessionResumedData) Validate() error {
	if strings.TrimSpace(d.Message) == "" {
		return errors.New("field message: required")
	}
	return nil
}

// CancelRequestedData is the payload of cancel.requested: a person asks
// the builder to stop the session. Reason is optional.
type CancelRequestedData struct {
	Reason string `json:"reason,omitempty"`
}

// SessionCancelledData is the payload of session.cancelled: the builder
// stopped the session at a person's request. It can be resumed
// (session.resumed) like an escalated one.
type SessionCancelledData struct {
	Reason     string `json:"reason"`
	TaskID     string `json:"task_id,omitempty"`
	Iterations int    `json:"iterations"`
	Tokens     int    `json:"tokens"`
}

func (d SessionCancelledData) Validate() error {
	if d.Reason == "" {
		return errors.New("field reason: required")
	}
	return nil
}
