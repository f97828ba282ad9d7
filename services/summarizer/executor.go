package summarizer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Model is the summarizer's LLM.
type Model interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// Cache keeps compaction results by compaction.CacheKey.
type Cache interface {
	CachedCompaction(ctx context.Context, key string) (string, bool, error)
	CacheCompaction(ctx context.Context, key, result string, ttl time.Duration) error
}

// Artifacts keeps full contents that a pointer replaces.
type Artifacts interface {
	PutArtifact(ctx context.Context, session, content string) (string, error)
}

// TokenCounter counts tokens.
type TokenCounter interface{ Count(text string) int }

// Executor carries out a compaction plan on a task's stored units. It is
// the part of the Summarizer that the benchmark drives directly.
type Executor struct {
	Model     Model
	Cache     Cache
	Artifacts Artifacts
	Tokens    TokenCounter
	Options   compaction.Options
	// SummaryPrompt is the system prompt of checkpoint merges (the
	// four-section summary of docs/design-origins.md, "The four-section
	// summary"); MaxSummaryTokens bounds a checkpoint.
	SummaryPrompt    string
	MaxSummaryTokens int
	CacheTTL         time.Duration
}

// Facts are what the session knows must survive any summary.
type Facts struct {
	ModifiedFiles    []string
	UnresolvedErrors []string
}

// Outcome is what applying a plan did.
type Outcome struct {
	Units     []units.Unit
	Applied   []events.CompactionOp
	LLMCalls  int
	CacheHits int
}

// checkpointID is the id of a task's running checkpoint.
func checkpointID(task string) string { return "checkpoint-" + task }

// ErrUnknownOp is wrapped when a plan holds an op the executor cannot carry
// out: a plan from a newer planner, or a planner op without executor
// support. Skipping it would report a compaction that did not happen.
var ErrUnknownOp = errors.New("unknown compaction op")

// Apply executes plan's ops in order over stored (the task's units as the
// store holds them) and returns the new stored units. Each op's outcome is
// recorded in hist (realised ratio, overshoot). When the model fails, the
// op is done extractively (whole lines, never a character cut). An op kind
// the executor does not know is an error wrapping ErrUnknownOp, before
// anything is changed.
func (e *Executor) Apply(ctx context.Context, session, task string, stored []units.Unit, plan compaction.Result, facts Facts, hist *compaction.History) (Outcome, error) {
	for k, op := range plan.Ops {
		if !slices.Contains(executable, op.Op) {
			return Outcome{}, fmt.Errorf("apply op %d (%s on %s): %w %q", k, op.Op, op.Unit, ErrUnknownOp, op.Op)
		}
	}
	view := compaction.ExpandCalls(stored)
	var out Outcome
	for _, op := range plan.Ops {
		payload, err := compaction.OpPayload(op, view)
		if err != nil {
			return out, err
		}
		i := slices.IndexFunc(view, func(u units.Unit) bool { return u.ID == op.Unit })
		if i < 0 {
			return out, fmt.Errorf("op %s: unit %q is not in the context", op.Op, op.Unit)
		}
		applied := events.CompactionOp{Unit: op.Unit, Op: string(op.Op), Lane: string(op.Lane), TokensBefore: op.Tokens}
		switch op.Op {
		case compaction.OpReplaceWithPointer:
			u, err := e.pointer(ctx, session, view[i], op)
			if err != nil {
				return out, err
			}
			applied.How, applied.TokensAfter = "pointer", u.Tokens
			if u.Tokens < view[i].Tokens {
				view[i] = u
			} else {
				applied.How = "not applied: no smaller"
			}
		case compaction.OpCompactToolArgs, compaction.OpCompactToolOutput, compaction.OpCompactHistorical:
			text, how, err := e.compact(ctx, session, op, payload, &out, hist)
			if err != nil {
				return out, err
			}
			u := rewrite(view[i], op.Op, text)
			u.Tokens = e.count(u)
			applied.How, applied.TokensAfter = how, u.Tokens
			if u.Tokens < view[i].Tokens {
				view[i] = u
			} else {
				// A rewrite no shorter than the original would only lose
				// detail: the original stays, and the outcome still
				// teaches the planner this label's realised ratio.
				applied.How = how + ", not applied: no smaller"
			}
		case compaction.OpCheckpointMerge:
			merged, a, err := e.merge(ctx, session, task, view, op, payload, facts, &out, hist)
			if err != nil {
				return out, err
			}
			applied = a
			if a.TokensAfter < a.TokensBefore {
				view = merged
			} else {
				applied.How += ", not applied: no smaller"
			}
		default:
			// Checked above; this keeps the switch honest if executable
			// gains an op it has no case for.
			return out, fmt.Errorf("apply %s on %s: %w %q", op.Op, op.Unit, ErrUnknownOp, op.Op)
		}
		hist.RecordOutcome(op, applied.TokensAfter, e.Options)
		out.Applied = append(out.Applied, applied)
	}
	out.Units = compaction.CollapseCalls(view)
	return out, nil
}

// executable are the op kinds Apply carries out.
var executable = []compaction.OpKind{
	compaction.OpReplaceWithPointer, compaction.OpCompactToolArgs, compaction.OpCompactToolOutput,
	compaction.OpCompactHistorical, compaction.OpCheckpointMerge,
}

func (e *Executor) count(u units.Unit) int {
	n := e.Tokens.Count(u.Content)
	if u.Kind == units.KindToolCall {
		n += e.Tokens.Count(u.Tool) + e.Tokens.Count(string(u.Args))
	}
	return n
}

// compact asks the model for a shorter rewrite of payload, or takes it
// from the cache; how says which ("llm", "cache", "extractive").
func (e *Executor) compact(ctx context.Context, session string, op compaction.Op, payload string, out *Outcome, hist *compaction.History) (string, string, error) {
	key := e.key(op, payload)
	if text, ok, err := e.Cache.CachedCompaction(ctx, key); err != nil {
		return "", "", err
	} else if ok {
		out.CacheHits++
		return text, "cache", nil
	}
	text, err := e.chat(ctx, session, CompactPrompt, CompactRequest(op, payload), op.OutputTokens)
	out.LLMCalls++
	if err != nil {
		if ctx.Err() != nil {
			return "", "", err
		}
		return compaction.Extract(payload, op.OutputTokens, e.Tokens.Count), "extractive", nil
	}
	if err := e.Cache.CacheCompaction(ctx, key, text, e.CacheTTL); err != nil {
		return "", "", err
	}
	remember(hist, key)
	return text, "llm", nil
}

func (e *Executor) key(op compaction.Op, payload string) string {
	if op.CacheKey != "" {
		return op.CacheKey
	}
	return compaction.CacheKey(payload, op.OutputTokens, op.Label, e.Options.Model, e.Options.PromptVersion)
}

// rewrite puts the compacted text in place of what op compacted, saying so:
// the builder must know it reads a digest, not the original.
func rewrite(u units.Unit, op compaction.OpKind, text string) units.Unit {
	text = strings.TrimSpace(text)
	switch op {
	case compaction.OpCompactToolArgs:
		u.Args = compactedArgs(u.Args, text)
	case compaction.OpCompactToolOutput:
		what := fmt.Sprintf("compacted %s output", u.Tool)
		marker := "[" + what + "]"
		if u.Artifact != "" {
			marker = tools.ArtifactPointer(what, u.Artifact)
		}
		u.Content = marker + "\n" + text
	default:
		u.Content = "[compacted] " + text
	}
	return u
}

// compactedArgs are a call's arguments replaced by text, keeping the path:
// it names the file, which still holds everything.
func compactedArgs(orig json.RawMessage, text string) json.RawMessage {
	args := map[string]any{"compacted": text}
	var m map[string]any
	if json.Unmarshal(orig, &m) == nil {
		if p, ok := m["path"]; ok {
			args["path"] = p
		}
	}
	b, _ := json.Marshal(args)
	return b
}

// pointer replaces a unit's content by where it can be read back whole
// and a digest of its most telling whole lines. For a tool call the
// arguments are what is replaced: they are all the model sees of a call
// (CollapseCalls keeps a call's arguments, not its content), and for
// write_file they hold the whole file.
func (e *Executor) pointer(ctx context.Context, session string, u units.Unit, op compaction.Op) (units.Unit, error) {
	full, digestOf := u.Content, u.Content
	if u.Kind == units.KindToolCall {
		full, digestOf = string(u.Args), string(u.Args)
		var m map[string]any
		if json.Unmarshal(u.Args, &m) == nil {
			// A file's lines digest better than its JSON encoding.
			if c, ok := m["content"].(string); ok {
				digestOf = c
			}
		}
	}
	where := op.Pointer
	if kind, ref, _ := strings.Cut(where, ":"); kind == "artifact" && ref == "" || where == "" {
		id := u.Artifact
		if id == "" {
			var err error
			if id, err = e.Artifacts.PutArtifact(ctx, session, full); err != nil {
				return u, err
			}
		}
		u.Artifact, where = id, "artifact:"+id
	}
	what := fmt.Sprintf("%d tokens replaced by a pointer", u.Tokens)
	marker := tools.ArtifactPointer(what, strings.TrimPrefix(where, "artifact:"))
	if p, ok := strings.CutPrefix(where, "file:"); ok {
		marker = tools.FilePointer(what, p)
	}
	// The digest gets what the marker leaves of the planned size.
	digestBudget := max(op.OutputTokens-e.Tokens.Count(marker)-1, 16)
	text := marker + "\n" + compaction.Extract(digestOf, digestBudget, e.Tokens.Count)
	if u.Kind == units.KindToolCall {
		u.Args = compactedArgs(u.Args, text)
	} else {
		u.Content = text
	}
	u.Tokens = e.count(u)
	return u, nil
}

// merge folds op.Units into the running checkpoint: one structured summary
// of the previous checkpoint and the newly stale units, checked against the
// session's facts, in place of all of them.
func (e *Executor) merge(ctx context.Context, session, task string, view []units.Unit, op compaction.Op, payload string, facts Facts, out *Outcome, hist *compaction.History) ([]units.Unit, events.CompactionOp, error) {
	merged := map[string]bool{}
	before := 0
	for _, id := range op.Units {
		merged[id] = true
	}
	if op.Checkpoint != "" {
		merged[op.Checkpoint] = true
	}
	for _, u := range view {
		if merged[u.ID] {
			before += u.Tokens
		}
	}
	target := min(max(op.OutputTokens, before/5), e.MaxSummaryTokens)
	applied := events.CompactionOp{Unit: op.Unit, Op: string(op.Op), Lane: string(op.Lane), TokensBefore: before}
	key := e.key(op, payload)
	summary, ok, err := e.Cache.CachedCompaction(ctx, key)
	switch {
	case err != nil:
		return view, applied, err
	case ok:
		out.CacheHits++
		applied.How = "cache"
	default:
		summary, err = e.chat(ctx, session, e.SummaryPrompt, SummaryRequest(payload, target), target)
		out.LLMCalls++
		if err != nil {
			if ctx.Err() != nil {
				return view, applied, err
			}
			summary, applied.How = compaction.Extract(payload, target, e.Tokens.Count), "extractive"
		} else {
			applied.How = "llm"
			if err := e.Cache.CacheCompaction(ctx, key, summary, e.CacheTTL); err != nil {
				return view, applied, err
			}
			remember(hist, key)
		}
	}
	// Ground truth beats the model: every modified file and unresolved
	// error the session knows of is in the checkpoint.
	summary = compaction.AppendMissingFacts(strings.TrimSpace(summary), facts.ModifiedFiles, facts.UnresolvedErrors)
	cp := units.Unit{ID: checkpointID(task), Role: openai.ChatMessageRoleUser, Kind: units.KindSummary,
		Content: "[checkpoint: summary of earlier work on this task]\n" + summary}
	cp.Tokens = e.Tokens.Count(cp.Content)
	for _, u := range view {
		if merged[u.ID] {
			cp.Turn = max(cp.Turn, u.Turn)
		}
	}
	next := make([]units.Unit, 0, len(view))
	for _, u := range view {
		if merged[u.ID] {
			continue
		}
		next = append(next, u)
	}
	// The checkpoint goes right after the stable head (system prompt,
	// task), where the builder reads the task and then what was done, and
	// which no compaction rewrites, so that the provider's prompt cache
	// keeps it.
	next = slices.Insert(next, compaction.StableHead(next), cp)
	applied.TokensAfter = cp.Tokens
	return next, applied, nil
}

// remember tells later plans that key's result is cached, so an op on an
// unchanged payload costs no call.
func remember(hist *compaction.History, key string) {
	if hist.Cached == nil {
		hist.Cached = map[string]bool{}
	}
	hist.Cached[key] = true
}

// errEmptyReply is a reply with no text: no summary, so the op is done
// extractively instead.
var errEmptyReply = errors.New("summarizer model: empty reply")

func (e *Executor) chat(ctx context.Context, session, system, prompt string, maxTokens int) (string, error) {
	text, err := llm.Text(ctx, e.Model, session, llm.Request{
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: system},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
		MaxTokens: maxTokens,
	})
	if err != nil {
		return "", fmt.Errorf("summarizer model: %w", err)
	}
	if strings.TrimSpace(text) == "" {
		return "", errEmptyReply
	}
	return text, nil
}

// PromptVersion names the prompts in cache keys: "v1" for the built-in
// ones, a hash of a configured summary prompt otherwise, so that a result
// written under one prompt is never served under another.
func PromptVersion(summaryPrompt string) string {
	if summaryPrompt == "" || summaryPrompt == DefaultSummaryPrompt {
		return "v1"
	}
	sum := sha256.Sum256([]byte(summaryPrompt))
	return "v1-" + hex.EncodeToString(sum[:6])
}

// DefaultSummaryPrompt asks for the four-section summary
// (docs/design-origins.md, "The four-section summary").
const DefaultSummaryPrompt = `You compact the working memory of a coding agent. Summarise the earlier work you are given
(a previous checkpoint, if any, and the messages and tool results that followed it) into a structured
summary with exactly these sections:
## Key Decisions
## Errors & Solutions
## Modified Files
## Critical Context
Keep every file path the agent modified, every error that is not yet solved, decisions and the reasons
for them, and facts the rest of the task needs. Drop pleasantries, repetition and finished exploration.
Be concise: aim for about a fifth of the input. Reply with the summary only.`

// CompactPrompt is the system prompt for rewriting one unit shorter.
const CompactPrompt = `You compact one item of a coding agent's working memory: a tool call's arguments, a tool's output,
or a message. Rewrite it much shorter while keeping what the agent may still need: paths, names, numbers,
error messages, results and conclusions. Never invent anything. Reply with the shorter text only.`

// CompactRequest is the request for one unit.
func CompactRequest(op compaction.Op, payload string) string {
	return fmt.Sprintf("Compact this %s (%s, about %d tokens) to at most %d tokens:\n\n%s",
		strings.ReplaceAll(strings.TrimPrefix(string(op.Op), "compact_"), "_", " "), op.Label, op.Tokens, op.OutputTokens, payload)
}

// SummaryRequest is the request for a checkpoint merge.
func SummaryRequest(payload string, target int) string {
	return fmt.Sprintf("Summarise into at most %d tokens:\n\n%s", target, payload)
}
