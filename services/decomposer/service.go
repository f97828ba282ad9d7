// Package decomposer owns task decomposition: on decompose.requested it asks
// the decomposer model for 2 to max_subtasks subtasks as strict JSON,
// checks the reply against a schema and the rules that stop runaway
// splitting (subtasks.go), asks once for a repair, and publishes
// task.decomposed with the subtasks or with the reason there are none.
package decomposer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/store"
)

// Name is the service name.
const Name = "decomposer"

// Bus is what the decomposer needs of the event bus.
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
}

// Store is what the decomposer needs of Redis: the session's state, read
// only, for the task to split and what was tried on it.
type Store interface {
	Awaiting(ctx context.Context, env events.Envelope, phase string) (store.Head, *store.TaskView, error)
}

// Model is the decomposer's LLM.
type Model interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// Deps are the decomposer's collaborators.
type Deps struct {
	Bus    Bus
	Store  Store
	Model  Model
	Clock  func() time.Time
	Log    *zap.Logger
	Config Config
}

// Service splits stuck tasks.
type Service struct{ d Deps }

// New builds the service; unset Config fields take their defaults.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	def := DefaultConfig()
	if d.Config.MaxSubtasks < 2 {
		d.Config.MaxSubtasks = def.MaxSubtasks
	}
	if d.Config.MaxTokens <= 0 {
		d.Config.MaxTokens = def.MaxTokens
	}
	return &Service{d: d}
}

// Run consumes decompose.requested until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{events.DecomposeRequested: s.onRequested}, s.d.Config.Run)
}

func (s *Service) onRequested(ctx context.Context, env events.Envelope) error {
	// The payload is for observers; the task, the signal and what was
	// tried come from the session's state, which only the builder writes.
	if _, err := events.DecodeAs[events.DecomposeRequestedData](env); err != nil {
		return err
	}
	log := s.d.Log.With(zap.String("session", env.Session), zap.String("task", env.Task), zap.Int("step", env.Step), zap.String("event", env.ID))
	view, task, err := s.d.Store.Awaiting(ctx, env, store.PhaseDecomposing)
	if store.Ignorable(err) {
		log.Warn("ignoring decompose.requested: the session does not await a decomposition (a late redelivery, or a forged event)", zap.Error(err))
		return nil
	}
	if err != nil {
		return err
	}
	req := requestOf(view, task)
	max := req.MaxSubtasks
	if max < 2 {
		max = s.d.Config.MaxSubtasks
	}
	return bus.Step[events.TaskDecomposedData]{
		Compute: func(ctx context.Context) (events.TaskDecomposedData, error) {
			out := events.TaskDecomposedData{ParentID: req.Task.ID}
			subs, calls, err := s.decompose(ctx, env.Session, req, max)
			out.LLMCalls = calls
			switch {
			case err == nil:
				out.Subtasks = subs
			case errors.Is(err, ErrInvalid):
				out.Error = err.Error()
			default:
				return out, err
			}
			return out, nil
		},
		// The model cannot be had: say so, so the builder escalates
		// instead of waiting for subtasks that never come.
		Failed: func(out events.TaskDecomposedData, err error) events.TaskDecomposedData {
			out.Error = err.Error()
			return out
		},
		Publish: func(ctx context.Context, out events.TaskDecomposedData) error {
			if out.Error != "" {
				log.Warn("no decomposition", zap.String("reason", out.Error))
			} else {
				ids := make([]string, len(out.Subtasks))
				for i, t := range out.Subtasks {
					ids[i] = t.ID
				}
				log.Info("decomposed", zap.Strings("subtasks", ids))
			}
			return s.d.Bus.Publish(ctx, events.Must(events.TaskDecomposed, env.Session, env.Task, env.Step, s.d.Clock(), out).For(env.Team))
		},
	}.Run(ctx)
}

// requestOf is what the decomposer works from: the session's current task
// as the state holds it, the signal the intervention answers, and the
// session's limits and task ids.
func requestOf(view store.Head, task *store.TaskView) events.DecomposeRequestedData {
	req := events.DecomposeRequestedData{Task: task.Task, Depth: task.Depth, MaxSubtasks: view.Limits.MaxSubtasks,
		Tried: slices.Clone(task.Interventions), TakenIDs: slices.Clone(view.TaskIDs)}
	if view.Signal != nil {
		req.Signal = *view.Signal
	}
	return req
}

// decompose asks once and, on a reply that cannot be used, once more with
// the reason; it returns the subtasks or an error wrapping ErrInvalid.
func (s *Service) decompose(ctx context.Context, session string, req events.DecomposeRequestedData, max int) ([]prd.Task, int, error) {
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: SystemPrompt},
		{Role: openai.ChatMessageRoleUser, Content: Prompt(req, max)},
	}
	ask := llm.Request{Messages: msgs, MaxTokens: s.d.Config.MaxTokens}
	text, err := llm.Text(ctx, s.d.Model, session, ask)
	if err != nil {
		return nil, 0, fmt.Errorf("decomposer model: %w", err)
	}
	subs, perr := Parse(text, req.Task, max, req.TakenIDs)
	if perr == nil {
		return subs, 1, nil
	}
	msgs = append(msgs,
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(
			"Your reply could not be used: %v.\nReply with only the JSON object, 2 to %d subtasks, matching this schema:\n%s", perr, max, SubtaskSchema)})
	ask.Messages = msgs
	repaired, err := llm.Text(ctx, s.d.Model, session, ask)
	if err != nil {
		return nil, 1, fmt.Errorf("decomposer model: %w", err)
	}
	subs, perr = Parse(repaired, req.Task, max, req.TakenIDs)
	if perr != nil {
		return nil, 2, fmt.Errorf("after one repair request: %w", perr)
	}
	return subs, 2, nil
}

// SystemPrompt tells the decomposer model what to return.
const SystemPrompt = `You are the task decomposition specialist of Ralph mesh. A coding agent is stuck on a task that is
too big or too vague to finish in a few steps. Split it into smaller subtasks that:
1. can each be completed in a few iterations,
2. have clear, testable acceptance criteria,
3. build on each other in order (a subtask may depend only on earlier ones),
4. together fully satisfy the original task's acceptance criteria.
Do not restate the original task as a subtask. Reply with only a JSON object, no prose:
{"subtasks": [{"id": "s1", "title": "...", "description": "...", "acceptance_criteria": ["..."], "depends_on": []}]}`

// Prompt is the request for one task.
func Prompt(req events.DecomposeRequestedData, max int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "TASK %s: %s\n", req.Task.ID, req.Task.Title)
	if req.Task.Description != "" {
		fmt.Fprintf(&b, "DESCRIPTION: %s\n", req.Task.Description)
	}
	b.WriteString("ACCEPTANCE CRITERIA:\n")
	for _, c := range req.Task.AcceptanceCriteria {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	if req.Task.Verify != "" {
		fmt.Fprintf(&b, "VERIFY COMMAND (must exit 0 when the whole task is done): %s\n", req.Task.Verify)
	}
	fmt.Fprintf(&b, "\nSTUCK PATTERN: %s (confidence %.2f)\nSTUCK REASON: %s\n", req.Signal.Pattern, req.Signal.Confidence, req.Signal.Diagnosis)
	if len(req.Tried) > 0 {
		fmt.Fprintf(&b, "ALREADY TRIED: %s\n", strings.Join(req.Tried, "; "))
	}
	fmt.Fprintf(&b, "\nBreak it into 2 to %d subtasks.", max)
	return b.String()
}
