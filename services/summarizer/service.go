// Package summarizer owns compaction and the session's memory. On
// compaction.requested it plans with the lane-aware planner
// (pkg/compaction), carries the plan out with the summarizer model
// (executor.go: rewrites, pointers, incremental checkpoints, a Redis cache,
// an extractive fallback), replaces the task's context with compare-and-set
// and publishes compaction.completed with what was planned, applied and
// skipped. On task.completed it takes what the approved task learned into
// the session's memory (memory.go, pkg/memory) and publishes
// memory.updated.
package summarizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Name is the service name.
const Name = "summarizer"

// Bus is what the summarizer needs of the event bus.
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
}

// Store is what the summarizer needs of Redis.
type Store interface {
	Cache
	Artifacts
	Context(ctx context.Context, session, scope string) ([]units.Unit, int64, error)
	ReplaceUnits(ctx context.Context, session, scope string, expect int64, us []units.Unit) (int64, error)
	Units(ctx context.Context, session, scope string) ([]units.Unit, error)
	LoadCompaction(ctx context.Context, session, task string, v any) (bool, error)
	SaveCompaction(ctx context.Context, session, task string, v any) error
	Awaiting(ctx context.Context, env events.Envelope, phase string) (store.Head, *store.TaskView, error)
	Session(ctx context.Context, session string) (store.SessionView, error)
	// The session's memory (what its approved tasks learned).
	LoadMemory(ctx context.Context, session string, v any) (int64, error)
	SaveMemory(ctx context.Context, session string, expect int64, v any) (int64, error)
	bus.Journal
}

// Deps are the summarizer's collaborators.
type Deps struct {
	Bus    Bus
	Store  Store
	Model  Model
	Tokens TokenCounter
	Clock  func() time.Time
	Log    *zap.Logger
	Config Config
}

// Service compacts contexts.
type Service struct {
	d    Deps
	exec *Executor
}

// New builds the service.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	c, def := &d.Config, DefaultConfig()
	// Zero options are unset ones; a set one may hold valid zeros.
	if c.Options.Mode == "" {
		c.Options = def.Options
	}
	if c.SummaryPrompt == "" {
		c.SummaryPrompt = def.SummaryPrompt
	}
	if c.MaxSummaryTokens <= 0 {
		c.MaxSummaryTokens = def.MaxSummaryTokens
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = def.CacheTTL
	}
	return &Service{d: d, exec: &Executor{Model: d.Model, Cache: d.Store, Artifacts: d.Store, Tokens: d.Tokens,
		Options: c.Options, SummaryPrompt: c.SummaryPrompt, MaxSummaryTokens: c.MaxSummaryTokens, CacheTTL: c.CacheTTL}}
}

// Run consumes compaction.requested and task.completed until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{
		events.CompactionRequested: s.onRequested,
		events.TaskCompleted:       s.onTaskCompleted,
	}, s.d.Config.Run)
}

const journalField = "compaction"

func (s *Service) onRequested(ctx context.Context, env events.Envelope) error {
	req, err := events.DecodeAs[events.CompactionRequestedData](env)
	if err != nil {
		return err
	}
	log := s.d.Log.With(zap.String("session", env.Session), zap.String("task", req.TaskID), zap.Int("step", env.Step),
		zap.Int("iteration", req.Iteration), zap.String("event", env.ID))
	// Only a compaction the session waits for is done, on the task it is
	// at: a forged or late request must not rewrite a context.
	if _, task, err := s.d.Store.Awaiting(ctx, env, store.PhaseCompacting); store.Ignorable(err) || (err == nil && task.ID != req.TaskID) {
		log.Warn("ignoring compaction.requested: the session does not await a compaction of this task (a late redelivery, or a forged event)", zap.Error(err))
		return nil
	} else if err != nil {
		return err
	}
	return bus.Step[events.CompactionCompletedData]{
		Compute: func(ctx context.Context) (events.CompactionCompletedData, error) {
			begin := s.d.Clock()
			out, err := s.compact(ctx, env, req, log)
			out.ElapsedMS = s.d.Clock().Sub(begin).Milliseconds()
			return out, err
		},
		// The context is left as it was, and the builder goes on with it.
		Failed: func(_ events.CompactionCompletedData, err error) events.CompactionCompletedData {
			return events.CompactionCompletedData{TaskID: req.TaskID, TokensBefore: req.ContextTokens, TokensAfter: req.ContextTokens, Error: err.Error()}
		},
		Publish: func(ctx context.Context, out events.CompactionCompletedData) error {
			if out.Error != "" {
				log.Warn("compaction failed", zap.String("reason", out.Error))
			} else {
				log.Info("compacted", zap.String("tier", out.Tier), zap.Int("tokens_before", out.TokensBefore), zap.Int("tokens_after", out.TokensAfter),
					zap.Int("applied", len(out.Applied)), zap.Int("skipped", len(out.Skipped)), zap.Int("llm_calls", out.LLMCalls), zap.Int("cache_hits", out.CacheHits))
			}
			return s.d.Bus.Publish(ctx, events.Must(events.CompactionCompleted, env.Session, env.Task, env.Step, s.d.Clock(), out).For(env.Team))
		},
	}.RunOnce(ctx, s.d.Store, env, journalField)
}

func (s *Service) compact(ctx context.Context, env events.Envelope, req events.CompactionRequestedData, log *zap.Logger) (events.CompactionCompletedData, error) {
	out := events.CompactionCompletedData{TaskID: req.TaskID, Mode: string(s.d.Config.Options.Mode)}
	stored, version, err := s.d.Store.Context(ctx, env.Session, req.TaskID)
	if err != nil {
		return out, err
	}
	var hist compaction.History
	if _, err := s.d.Store.LoadCompaction(ctx, env.Session, req.TaskID, &hist); err != nil {
		return out, err
	}
	step, err := s.exec.Compact(ctx, env.Session, req, stored, &hist, s.d.Config.Advisor)
	plan, res := step.Plan, step.Outcome
	out.Tier, out.TokensBefore, out.TargetTokens = string(plan.Tier), plan.TokensBefore, plan.TargetTokens
	for _, op := range plan.Ops {
		out.Planned = append(out.Planned, events.CompactionOp{Unit: op.Unit, Op: string(op.Op), Lane: string(op.Lane), TokensBefore: op.Tokens, TokensAfter: op.Tokens - op.TokensSaved})
	}
	for _, sk := range plan.Skipped {
		out.Skipped = append(out.Skipped, events.CompactionSkip{Unit: sk.Unit, Reason: string(sk.Reason)})
	}
	out.LLMCalls, out.CacheHits, out.Applied = res.LLMCalls, res.CacheHits, res.Applied
	if err != nil {
		return out, err
	}
	if len(plan.Ops) == 0 {
		out.TokensAfter = plan.TokensBefore
		return out, s.d.Store.SaveCompaction(ctx, env.Session, req.TaskID, hist)
	}
	if _, err := s.d.Store.ReplaceUnits(ctx, env.Session, req.TaskID, version, res.Units); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return out, fmt.Errorf("compact %s: the context changed while compacting: %w", req.TaskID, err)
		}
		return out, err
	}
	out.TokensAfter = units.Total(res.Units)
	return out, s.d.Store.SaveCompaction(ctx, env.Session, req.TaskID, hist)
}

// FactsOf is what a task's context says must survive any summary: the
// files it modified (known ones first, then every path it wrote) and the
// errors it has not got past.
func FactsOf(stored []units.Unit, knownFiles []string) Facts {
	return Facts{ModifiedFiles: modifiedFiles(stored, knownFiles), UnresolvedErrors: unresolvedErrors(stored)}
}

// modifiedFiles are the task's changed files and every path it wrote.
func modifiedFiles(us []units.Unit, known []string) []string {
	files := slices.Clone(known)
	for _, u := range compaction.ExpandCalls(us) {
		if u.Kind == units.KindToolCall && (u.Tool == tools.WriteFile || u.Tool == tools.EditFile) {
			if p := argPath(u.Args); p != "" && !slices.Contains(files, p) {
				files = append(files, p)
			}
		}
	}
	return files
}

// unresolvedErrors are the error lines (tools.TextErrorLine) of the latest
// result of each call that failed and did not succeed after. Only results
// the builder marked as failed count (a run that exited non-zero, a tool
// error): a file that talks about failures is not an error.
func unresolvedErrors(us []units.Unit) []string {
	last := map[string]units.Unit{}
	var order []string
	for _, u := range us {
		if u.Kind != units.KindToolResult {
			continue
		}
		k := u.Tool + "\x00" + string(u.Args)
		if _, seen := last[k]; !seen {
			order = append(order, k)
		}
		last[k] = u
	}
	var errs []string
	for _, k := range order {
		if line := tools.TextErrorLine(last[k].Content); line != "" && !slices.Contains(errs, line) {
			errs = append(errs, line)
		}
	}
	return errs
}

func argPath(raw []byte) string {
	var a struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return ""
	}
	return a.Path
}

// askAdvisor asks the summarizer model to rank the near-tied candidates,
// within timeout, and returns its raw answer: compaction.ApplyAdvice parses
// and checks it, and ignores it when it is wrong.
func askAdvisor(ctx context.Context, m Model, session string, cands []compaction.Candidate, timeout time.Duration) ([]byte, error) {
	b, err := json.Marshal(cands)
	if err != nil {
		return nil, fmt.Errorf("advisor: encode candidates: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	text, err := llm.Text(ctx, m, session, llm.Request{
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: AdvisorPrompt},
			{Role: openai.ChatMessageRoleUser, Content: string(b)},
		},
		MaxTokens: 300,
	})
	if err != nil {
		return nil, fmt.Errorf("advisor: %w", err)
	}
	return []byte(text), nil
}

// AdvisorPrompt asks for the strict ranking the planner accepts.
const AdvisorPrompt = `You advise a context compaction planner. The candidates below are near-tied operations on a coding
agent's working memory. Rank them from the one whose loss would hurt the agent least to the most.
Reply with only a JSON array, one object per candidate:
[{"candidate_id": "...", "priority": 1, "rationale_tag": "stale_output"}]`
