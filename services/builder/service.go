package builder

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
	"github.com/ralphmesh/ralph/pkg/metrics"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Name is the service name (and consumer name prefix).
const Name = "builder"

// Bus is what the builder needs of the event bus.
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
}

// Store is what the builder needs of Redis.
type Store interface {
	LoadState(ctx context.Context, session string, v any) (int64, error)
	SaveState(ctx context.Context, session string, expect int64, v any) (int64, error)
	AppendUnits(ctx context.Context, session, scope string, us ...units.Unit) error
	Units(ctx context.Context, session, scope string) ([]units.Unit, error)
	PutArtifact(ctx context.Context, session, content string) (string, error)
	GetArtifact(ctx context.Context, session, id string) (string, error)
	JournalGet(ctx context.Context, session string, step int, field string, v any) (bool, error)
	JournalPut(ctx context.Context, session string, step int, field string, v any) error
}

// Model is the builder's LLM.
type Model interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// TokenCounter counts context tokens.
type TokenCounter interface{ Count(text string) int }

// Config is the builder's own configuration.
type Config struct {
	Limits            events.Limits
	Tools             tools.Options
	InlineOutputBytes int
	MaxTokens         int
	Run               bus.RunOptions
}

// Deps are the builder's collaborators.
type Deps struct {
	Bus    Bus
	Store  Store
	Model  Model
	Tokens TokenCounter
	Clock  func() time.Time
	Log    *zap.Logger
	Config Config
	// Metrics may be nil.
	Metrics *metrics.Metrics
}

// Service runs the loop for every session it is handed.
type Service struct{ d Deps }

// New builds the service.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	if d.Config.InlineOutputBytes <= 0 {
		d.Config.InlineOutputBytes = 16 << 10
	}
	return &Service{d: d}
}

// Run consumes the builder's events until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{
		events.SessionStarted:      s.onStarted,
		events.IterationRequested:  s.onIteration,
		events.IterationAnalyzed:   s.onAnalyzed,
		events.CritiqueCompleted:   s.onCritique,
		events.PruneCompleted:      s.onPruned,
		events.TaskDecomposed:      s.onDecomposed,
		events.SessionResumed:      s.onResumed,
		events.CompactionCompleted: s.onCompacted,
	}, s.d.Config.Run)
}

func (s *Service) onCompacted(ctx context.Context, env events.Envelope) error {
	var d events.CompactionCompletedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	return s.apply(ctx, env, Compacted{Step: env.Step, Data: d})
}

func (s *Service) onPruned(ctx context.Context, env events.Envelope) error {
	var d events.PruneCompletedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	return s.apply(ctx, env, Pruned{Step: env.Step, Data: d})
}

func (s *Service) onDecomposed(ctx context.Context, env events.Envelope) error {
	var d events.TaskDecomposedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	return s.apply(ctx, env, Decomposed{Step: env.Step, Data: d})
}

func (s *Service) onResumed(ctx context.Context, env events.Envelope) error {
	var d events.SessionResumedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	return s.apply(ctx, env, Resumed{Step: env.Step, Data: d})
}

func (s *Service) log(env events.Envelope) *zap.Logger {
	return s.d.Log.With(zap.String("session", env.Session), zap.String("task", env.Task),
		zap.Int("step", env.Step), zap.String("event", env.ID))
}

func (s *Service) onStarted(ctx context.Context, env events.Envelope) error {
	var d events.SessionStartedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	var existing State
	ver, err := s.d.Store.LoadState(ctx, env.Session, &existing)
	switch {
	case err == nil:
		// A duplicate start: finish whatever the first one began.
		return s.execute(ctx, existing.Pending)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	var st State
	var cmds []Command
	if _, werr := tools.NewWorkspace(d.Workspace); werr != nil {
		st = State{Session: env.Session, Workspace: d.Workspace, Current: -1}
		st, cmds, _ = st.fail(fmt.Sprintf("workspace %s: %v", d.Workspace, werr), s.d.Clock())
	} else {
		st, cmds = Start(env.Session, d, s.d.Config.Limits, s.d.Clock())
	}
	st.Pending = cmds
	if _, err := s.d.Store.SaveState(ctx, env.Session, ver, st); err != nil {
		return err
	}
	s.log(env).Info("session started", zap.Int("tasks", len(st.Tasks)), zap.String("workspace", d.Workspace))
	return s.execute(ctx, cmds)
}

func (s *Service) onAnalyzed(ctx context.Context, env events.Envelope) error {
	var d events.IterationAnalyzedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	return s.apply(ctx, env, Analyzed{Step: env.Step, Data: d})
}

func (s *Service) onCritique(ctx context.Context, env events.Envelope) error {
	var d events.CritiqueCompletedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	return s.apply(ctx, env, Critiqued{Step: env.Step, Data: d})
}

// apply feeds one input to the state machine, persists the new state with
// its commands under compare-and-set, then executes the commands. A stale
// input re-executes the commands of the transition that made it stale,
// which finishes the work of a replica that died between save and publish.
func (s *Service) apply(ctx context.Context, env events.Envelope, in any) error {
	var st State
	ver, err := s.d.Store.LoadState(ctx, env.Session, &st)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return bus.Permanent(err)
		}
		return err
	}
	next, cmds, err := Next(st, in, s.d.Clock())
	if errors.Is(err, ErrStale) {
		s.log(env).Debug("stale event; re-executing pending commands", zap.String("phase", string(st.Phase)), zap.Int("state_step", st.Step))
		return s.execute(ctx, st.Pending)
	}
	if err != nil {
		return bus.Permanent(err)
	}
	next.Pending = cmds
	if _, err := s.d.Store.SaveState(ctx, env.Session, ver, next); err != nil {
		return err
	}
	if next.Phase != st.Phase || next.Step != st.Step {
		s.log(env).Info("transition", zap.String("from", string(st.Phase)), zap.String("to", string(next.Phase)), zap.Int("next_step", next.Step))
	}
	return s.execute(ctx, cmds)
}

func (s *Service) execute(ctx context.Context, cmds []Command) error {
	for _, c := range cmds {
		switch {
		case c.Append != nil:
			us := slices.Clone(c.Append.Units)
			for i := range us {
				if us[i].Tokens == 0 {
					us[i].Tokens = s.d.Tokens.Count(us[i].Content)
				}
			}
			if err := s.d.Store.AppendUnits(ctx, sessionOf(cmds), c.Append.Scope, us...); err != nil {
				return err
			}
		case c.Publish != nil:
			if err := s.d.Bus.Publish(ctx, *c.Publish); err != nil {
				return err
			}
		}
	}
	return nil
}

// sessionOf finds the session of a command list; every transition publishes
// at least one event, which names it.
func sessionOf(cmds []Command) string {
	for _, c := range cmds {
		if c.Publish != nil {
			return c.Publish.Session
		}
	}
	return ""
}

// journaledReply is the LLM answer of a step as the journal keeps it.
type journaledReply struct {
	Content string       `json:"content"`
	Calls   []units.Call `json:"calls,omitempty"`
	Usage   events.Usage `json:"usage"`
}

// toolStart marks that a tool call began, so a redelivered step knows a
// shell command may already have had its effects.
type toolStart struct {
	At time.Time `json:"at"`
}

func (s *Service) onIteration(ctx context.Context, env events.Envelope) error {
	var d events.IterationRequestedData
	if err := env.Decode(&d); err != nil {
		return err
	}
	var st State
	if _, err := s.d.Store.LoadState(ctx, env.Session, &st); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return bus.Permanent(err)
		}
		return err
	}
	if st.Phase != PhaseIterating || st.Step != env.Step {
		return s.execute(ctx, st.Pending)
	}
	rec, err := s.runStep(ctx, env, &st)
	if err != nil {
		var abort abortError
		if errors.As(err, &abort) {
			return s.abort(ctx, env, abort.reason)
		}
		if ctx.Err() == nil && bus.LastDelivery(ctx) {
			// The step failed on every delivery JetStream allows (the
			// model endpoint is down, say): end the session with the
			// reason rather than leave it waiting for a step that never
			// comes.
			return s.abort(ctx, env, fmt.Sprintf("step %d failed on its last delivery: %v", env.Step, err))
		}
		return err
	}
	return s.apply(ctx, env, IterationDone{Step: env.Step, Record: rec})
}

// abortError ends the session: the step cannot succeed however often it is
// retried (a rejected API key, a missing workspace).
type abortError struct{ reason string }

func (a abortError) Error() string { return a.reason }

func (s *Service) abort(ctx context.Context, env events.Envelope, reason string) error {
	var st State
	ver, err := s.d.Store.LoadState(ctx, env.Session, &st)
	if err != nil {
		return err
	}
	if st.Done() || st.Step != env.Step {
		return s.execute(ctx, st.Pending)
	}
	next, cmds, _ := st.fail(reason, s.d.Clock())
	next.Pending = cmds
	if _, err := s.d.Store.SaveState(ctx, env.Session, ver, next); err != nil {
		return err
	}
	s.log(env).Error("session aborted", zap.String("reason", reason))
	return s.execute(ctx, cmds)
}

// runStep is one iteration: one LLM call with the task's context, then the
// tool calls it asked for. Every effect is journaled under the step.
func (s *Service) runStep(ctx context.Context, env events.Envelope, st *State) (events.IterationRecord, error) {
	t := st.CurrentTask()
	log := s.log(env)
	ws, err := tools.NewWorkspace(st.Workspace)
	if err != nil {
		return events.IterationRecord{}, abortError{fmt.Sprintf("workspace %s: %v", st.Workspace, err)}
	}
	ctxUnits, err := s.d.Store.Units(ctx, env.Session, t.ID)
	if err != nil {
		return events.IterationRecord{}, err
	}
	turn := t.Turns + 1

	var reply journaledReply
	found, err := s.d.Store.JournalGet(ctx, env.Session, env.Step, "llm", &reply)
	if err != nil {
		return events.IterationRecord{}, err
	}
	if !found {
		resp, err := s.d.Model.Chat(ctx, env.Session, openai.ChatCompletionRequest{
			Messages:  units.Messages(ctxUnits),
			Tools:     tools.Definitions(),
			MaxTokens: s.d.Config.MaxTokens,
		})
		if err != nil {
			if llm.IsRetryable(err) || ctx.Err() != nil {
				return events.IterationRecord{}, fmt.Errorf("builder model: %w", err)
			}
			return events.IterationRecord{}, abortError{fmt.Sprintf("builder model: %v", err)}
		}
		if len(resp.Choices) == 0 {
			return events.IterationRecord{}, fmt.Errorf("builder model: reply without choices")
		}
		msg := resp.Choices[0].Message
		reply = journaledReply{Content: msg.Content, Usage: events.Usage{InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens}}
		for _, c := range msg.ToolCalls {
			reply.Calls = append(reply.Calls, units.Call{ID: c.ID, Name: c.Function.Name, Args: c.Function.Arguments})
		}
		if err := s.d.Store.JournalPut(ctx, env.Session, env.Step, "llm", reply); err != nil {
			return events.IterationRecord{}, err
		}
	} else {
		log.Info("replaying journaled model reply")
	}

	newUnits := []units.Unit{{
		ID: fmt.Sprintf("assistant-%d", env.Step), Role: openai.ChatMessageRoleAssistant, Kind: units.KindMessage,
		Content: reply.Content, Turn: turn, Calls: reply.Calls, Tokens: s.count(reply.Content, reply.Calls),
	}}
	rec := events.IterationRecord{
		Iteration: st.Iteration + 1, TaskID: t.ID, AssistantText: reply.Content,
		Usage: reply.Usage, ClaimedDone: len(reply.Calls) == 0, Compacted: st.JustCompacted,
	}
	exec := tools.NewExecutor(ws, sessionArtifacts{s.d.Store, env.Session}, s.d.Config.Tools)
	for i, call := range reply.Calls {
		res, err := s.runTool(ctx, env, exec, i, call)
		if err != nil {
			return events.IterationRecord{}, err
		}
		log.Info("tool call", zap.String("tool", call.Name), zap.Int("exit_code", res.ExitCode), zap.Bool("error", res.Error != ""))
		s.d.Metrics.ToolCall(call.Name, res.Error != "" || res.ExitCode != 0)
		content, artifact, err := s.toolContent(ctx, env.Session, call, res)
		if err != nil {
			return events.IterationRecord{}, err
		}
		newUnits = append(newUnits, units.Unit{
			ID: fmt.Sprintf("tool-%d-%d", env.Step, i), Role: openai.ChatMessageRoleTool, Kind: units.KindToolResult,
			Tool: call.Name, CallID: call.ID, Args: units.ArgsJSON(call.Args), Content: content, Turn: turn,
			Tokens: s.d.Tokens.Count(content), Artifact: artifact,
		})
		rec.ToolCalls = append(rec.ToolCalls, events.ToolCall{
			ID: call.ID, Name: call.Name, Args: units.ArgsJSON(call.Args),
			Output: res.Output, Error: res.Error, ExitCode: res.ExitCode,
		})
		for _, f := range res.FilesChanged {
			if !slices.Contains(rec.FilesChanged, f) {
				rec.FilesChanged = append(rec.FilesChanged, f)
			}
		}
	}
	if err := s.d.Store.AppendUnits(ctx, env.Session, t.ID, newUnits...); err != nil {
		return events.IterationRecord{}, err
	}
	rec.ContextTokens = units.Total(ctxUnits) + units.Total(newUnits)
	if rec.WorkspaceHash, err = tools.Hash(ws.Root()); err != nil {
		return events.IterationRecord{}, fmt.Errorf("hash workspace: %w", err)
	}
	return rec, nil
}

// runTool executes call i of the step, or replays its journaled result. A
// shell command that started but whose result was never recorded (the
// replica died while it ran) is not run again: its effects are unknown, and
// the model is told so.
func (s *Service) runTool(ctx context.Context, env events.Envelope, exec *tools.Executor, i int, call units.Call) (tools.Result, error) {
	resultKey, startKey := fmt.Sprintf("tool:%d", i), fmt.Sprintf("start:%d", i)
	var res tools.Result
	if found, err := s.d.Store.JournalGet(ctx, env.Session, env.Step, resultKey, &res); err != nil || found {
		return res, err
	}
	if call.Name == "run" {
		var started toolStart
		found, err := s.d.Store.JournalGet(ctx, env.Session, env.Step, startKey, &started)
		if err != nil {
			return res, err
		}
		if found {
			res = tools.Result{Error: fmt.Sprintf("this command was interrupted at %s when the builder replica running it stopped; "+
				"it was not run again because it may already have had effects. Check the workspace before running it again.",
				started.At.UTC().Format(time.RFC3339)), ExitCode: -1}
			return res, s.d.Store.JournalPut(ctx, env.Session, env.Step, resultKey, res)
		}
		if err := s.d.Store.JournalPut(ctx, env.Session, env.Step, startKey, toolStart{At: s.d.Clock()}); err != nil {
			return res, err
		}
	}
	res, err := exec.Execute(ctx, call.Name, call.Args)
	if err != nil {
		return res, fmt.Errorf("tool %s: %w", call.Name, err)
	}
	return res, s.d.Store.JournalPut(ctx, env.Session, env.Step, resultKey, res)
}

// toolContent is what the model sees of a tool result. An output larger
// than InlineOutputBytes is stored whole as an artifact and replaced by a
// pointer with a digest of whole lines; the model can read it all back with
// read_artifact. Text is never cut mid-line.
func (s *Service) toolContent(ctx context.Context, session string, call units.Call, res tools.Result) (content, artifact string, err error) {
	text := res.Text(call.Name)
	if len(text) <= s.d.Config.InlineOutputBytes {
		return text, "", nil
	}
	id, err := s.d.Store.PutArtifact(ctx, session, text)
	if err != nil {
		return "", "", err
	}
	return PointerDigest(text, id, s.d.Config.InlineOutputBytes/2), id, nil
}

// PointerDigest describes an artifact by its size and whole lines from its
// head and tail, within about budget bytes: half for the head, the rest for
// the tail. A line that does not fit is left out whole, never cut.
func PointerDigest(text, id string, budget int) string {
	lines := strings.Split(text, "\n")
	used, nHead := 0, 0
	for _, l := range lines {
		if used+len(l)+1 > budget/2 {
			break
		}
		used += len(l) + 1
		nHead++
	}
	nTail := 0
	for k := len(lines) - 1; k >= nHead; k-- {
		if used+len(lines[k])+1 > budget {
			break
		}
		used += len(lines[k]) + 1
		nTail++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%d bytes in %d lines, stored whole as artifact %s; call read_artifact {\"id\": %q} to read all of it]\n",
		len(text), len(lines), id, id)
	b.WriteString(strings.Join(lines[:nHead], "\n"))
	if omitted := len(lines) - nHead - nTail; omitted > 0 {
		fmt.Fprintf(&b, "\n[... %d lines not shown ...]\n", omitted)
	} else {
		b.WriteString("\n")
	}
	b.WriteString(strings.Join(lines[len(lines)-nTail:], "\n"))
	return b.String()
}

func (s *Service) count(content string, calls []units.Call) int {
	n := s.d.Tokens.Count(content)
	for _, c := range calls {
		n += s.d.Tokens.Count(c.Name) + s.d.Tokens.Count(c.Args)
	}
	return n
}

// sessionArtifacts lets read_artifact reach the session's artifacts.
type sessionArtifacts struct {
	st      Store
	session string
}

func (a sessionArtifacts) GetArtifact(ctx context.Context, id string) (string, error) {
	v, err := a.st.GetArtifact(ctx, a.session, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: %v", tools.ErrArtifactNotFound, err)
	}
	return v, err
}
