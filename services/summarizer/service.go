// Package summarizer owns compaction: on compaction.requested it plans with
// the lane-aware planner (pkg/compaction), carries the plan out with the
// summarizer model (executor.go: rewrites, pointers, incremental
// checkpoints, a Redis cache, an extractive fallback), replaces the task's
// context with compare-and-set and publishes compaction.completed with what
// was planned, applied and skipped.
package summarizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
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
	LoadCompaction(ctx context.Context, session, task string, v any) (bool, error)
	SaveCompaction(ctx context.Context, session, task string, v any) error
	JournalGet(ctx context.Context, session string, step int, field string, v any) (bool, error)
	JournalPut(ctx context.Context, session string, step int, field string, v any) error
}

// Config is the summarizer's configuration.
type Config struct {
	Options          compaction.Options
	SummaryPrompt    string
	MaxSummaryTokens int
	CacheTTL         time.Duration
	// Advisor enables the advisory ranking of near-tied candidates by the
	// summarizer model.
	Advisor bool
	Run     bus.RunOptions
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
	c := &d.Config
	if c.Options.Mode == "" {
		c.Options = compaction.DefaultOptions()
	}
	if c.SummaryPrompt == "" {
		c.SummaryPrompt = DefaultSummaryPrompt
	}
	if c.MaxSummaryTokens <= 0 {
		c.MaxSummaryTokens = 2000
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = 24 * time.Hour
	}
	return &Service{d: d, exec: &Executor{Model: d.Model, Cache: d.Store, Artifacts: d.Store, Tokens: d.Tokens,
		Options: c.Options, SummaryPrompt: c.SummaryPrompt, MaxSummaryTokens: c.MaxSummaryTokens, CacheTTL: c.CacheTTL}}
}

// Run consumes compaction.requested until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{events.CompactionRequested: s.onRequested}, s.d.Config.Run)
}

const journalField = "compaction"

func (s *Service) onRequested(ctx context.Context, env events.Envelope) error {
	var req events.CompactionRequestedData
	if err := env.Decode(&req); err != nil {
		return err
	}
	log := s.d.Log.With(zap.String("session", env.Session), zap.String("task", req.TaskID), zap.Int("step", env.Step),
		zap.Int("iteration", req.Iteration), zap.String("event", env.ID))
	var out events.CompactionCompletedData
	found, err := s.d.Store.JournalGet(ctx, env.Session, env.Step, journalField, &out)
	if err != nil {
		return err
	}
	if !found {
		begin := s.d.Clock()
		out, err = s.compact(ctx, env, req, log)
		out.ElapsedMS = s.d.Clock().Sub(begin).Milliseconds()
		switch {
		case err == nil:
		case ctx.Err() == nil && (bus.LastDelivery(ctx) || bus.IsPermanent(err)):
			out = events.CompactionCompletedData{TaskID: req.TaskID, TokensBefore: req.ContextTokens, TokensAfter: req.ContextTokens, Error: err.Error()}
		default:
			return err
		}
		if err := s.d.Store.JournalPut(ctx, env.Session, env.Step, journalField, out); err != nil {
			return err
		}
	}
	if out.Error != "" {
		log.Warn("compaction failed", zap.String("reason", out.Error))
	} else {
		log.Info("compacted", zap.String("tier", out.Tier), zap.Int("tokens_before", out.TokensBefore), zap.Int("tokens_after", out.TokensAfter),
			zap.Int("applied", len(out.Applied)), zap.Int("skipped", len(out.Skipped)), zap.Int("llm_calls", out.LLMCalls), zap.Int("cache_hits", out.CacheHits))
	}
	return s.d.Bus.Publish(ctx, events.Must(events.CompactionCompleted, env.Session, env.Task, env.Step, s.d.Clock(), out))
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
	hist.StartIteration(max(req.Iteration, 1))
	doc := compaction.Document{LimitTokens: req.LimitTokens, CurrentTurn: req.Turn, Task: compaction.Task{Goal: req.Goal}, Units: stored}
	var adv compaction.Advisor
	if s.d.Config.Advisor {
		adv = modelAdvisor{s.d.Model, env.Session}
	}
	plan, err := compaction.Plan(ctx, doc, s.d.Config.Options, hist, adv)
	if err != nil {
		return out, bus.Permanent(fmt.Errorf("plan compaction of %s: %w", req.TaskID, err))
	}
	hist.Commit(plan)
	out.Tier, out.TokensBefore, out.TargetTokens = string(plan.Tier), plan.TokensBefore, plan.TargetTokens
	for _, op := range plan.Ops {
		out.Planned = append(out.Planned, events.CompactionOp{Unit: op.Unit, Op: string(op.Op), Lane: string(op.Lane), TokensBefore: op.Tokens, TokensAfter: op.Tokens - op.TokensSaved})
	}
	for _, sk := range plan.Skipped {
		out.Skipped = append(out.Skipped, events.CompactionSkip{Unit: sk.Unit, Reason: string(sk.Reason)})
	}
	if len(plan.Ops) == 0 {
		out.TokensAfter = plan.TokensBefore
		return out, s.d.Store.SaveCompaction(ctx, env.Session, req.TaskID, hist)
	}
	facts := FactsOf(stored, req.FilesChanged)
	res, err := s.exec.Apply(ctx, env.Session, req.TaskID, stored, plan, facts, &hist)
	out.LLMCalls, out.CacheHits, out.Applied = res.LLMCalls, res.CacheHits, res.Applied
	if err != nil {
		return out, err
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
		if u.Kind == units.KindToolCall && (u.Tool == "write_file" || u.Tool == "edit_file") {
			if p := argPath(u.Args); p != "" && !slices.Contains(files, p) {
				files = append(files, p)
			}
		}
	}
	return files
}

// unresolvedErrors are the first error lines of the latest result of each
// call that failed and did not succeed after.
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
		if line := errorLine(last[k].Content); line != "" && !slices.Contains(errs, line) {
			errs = append(errs, line)
		}
	}
	return errs
}

// errorLine is the line that says what went wrong in a failed tool result,
// "" for a result that did not fail. Only results the builder marked as
// failed count (a run that exited non-zero, a tool error): a file that
// talks about failures is not an error.
func errorLine(content string) string {
	switch {
	case !tools.TextFailed(content):
		return ""
	case strings.HasPrefix(content, "error: "):
		first, _, _ := strings.Cut(content, "\n")
		return first
	case !strings.HasPrefix(content, "exit code "):
		_, tail, _ := strings.Cut(content, "\nerror: ")
		first, _, _ := strings.Cut(tail, "\n")
		return "error: " + first
	}
	first, rest, _ := strings.Cut(content, "\n")
	last := ""
	for _, l := range strings.Split(rest, "\n") {
		t := strings.TrimSpace(l)
		low := strings.ToLower(t)
		if strings.HasPrefix(low, "error") || strings.Contains(low, "error:") || strings.Contains(low, "fail") || strings.Contains(low, "panic") {
			return t
		}
		if t != "" {
			last = t
		}
	}
	// No line says "error": programs print the reason last.
	if last != "" {
		return last
	}
	return first
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

// modelAdvisor asks the summarizer model to rank near-tied candidates; the
// planner parses and checks its answer and ignores it when it is wrong.
type modelAdvisor struct {
	m       Model
	session string
}

func (a modelAdvisor) Rank(ctx context.Context, cands []compaction.Candidate) ([]byte, error) {
	b, err := json.Marshal(cands)
	if err != nil {
		return nil, err
	}
	resp, err := a.m.Chat(ctx, a.session, openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: AdvisorPrompt},
			{Role: openai.ChatMessageRoleUser, Content: string(b)},
		},
		MaxTokens: 300,
	})
	if err != nil {
		return nil, err
	}
	if len(resp.Choices) == 0 {
		return nil, errNoChoices
	}
	return []byte(resp.Choices[0].Message.Content), nil
}

// AdvisorPrompt asks for the strict ranking the planner accepts.
const AdvisorPrompt = `You advise a context compaction planner. The candidates below are near-tied operations on a coding
agent's working memory. Rank them from the one whose loss would hurt the agent least to the most.
Reply with only a JSON array, one object per candidate:
[{"candidate_id": "...", "priority": 1, "rationale_tag": "stale_output"}]`
