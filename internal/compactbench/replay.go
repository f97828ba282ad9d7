package compactbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/units"
	"github.com/ralphmesh/ralph/services/summarizer"
)

// Strategy is how the context is kept under the window.
type Strategy string

// Strategies, in report order.
const (
	// StrategyNone never compacts: the baseline for tokens.
	StrategyNone Strategy = "none"
	// StrategyTruncation drops the oldest whole steps after the system
	// prompt and the task until the context is under the target. It exists
	// only in the benchmark, as the naive baseline.
	StrategyTruncation Strategy = "truncation"
	// The planner's modes, carried out by the summarizer's Executor.
	StrategyLegacy         Strategy = "legacy"
	StrategyTiered         Strategy = "tiered"
	StrategyTieredAdaptive Strategy = "tiered_adaptive"
)

// Strategies are all strategies in report order.
var Strategies = []Strategy{StrategyNone, StrategyTruncation, StrategyLegacy, StrategyTiered, StrategyTieredAdaptive}

// DefaultWindow is the builder model's context window the benchmark
// assumes: small enough that the session (about two and a half windows of
// tokens) passes the compaction threshold several times, large enough to
// hold everything one drafting step needs.
const DefaultWindow = 16000

// Options configure a benchmark run. The zero value runs every strategy
// with DefaultWindow.
type Options struct {
	// Window is the builder model's context window in tokens.
	Window int
	// Strategies to run; none means all. StrategyNone always runs: the
	// others are measured against it.
	Strategies []Strategy
}

// Compaction is one compaction a strategy carried out after an iteration.
type Compaction struct {
	Iteration    int
	Tier         string
	TokensBefore int
	TokensAfter  int
	TargetMet    bool
	// Ops counts the applied ops by op kind and how they were done
	// ("compact_tool_output/llm", "replace_with_pointer/pointer").
	Ops       map[string]int
	Applied   []AppliedOp
	LLMCalls  int
	CacheHits int
	Skipped   map[string]int // by reason
	Elapsed   time.Duration
}

// AppliedOp is one op the executor carried out.
type AppliedOp struct {
	Unit, Op, How             string
	TokensBefore, TokensAfter int
}

// Result is one strategy's run of the session.
type Result struct {
	Strategy Strategy
	// Completed: every builder call fit the window.
	Completed bool
	// Overflow is the first iteration whose context exceeded the window
	// (0 if none). The replay goes on past it as if the model had
	// accepted the context, so that the token totals stay comparable.
	Overflow   int
	Iterations int
	// InputTokens is the sum over iterations of the context the builder
	// model is sent; PeakTokens the largest of them.
	InputTokens int
	PeakTokens  int
	// Reduction is the share of StrategyNone's input tokens saved, in
	// percent.
	Reduction   float64
	Compactions []Compaction
	LLMCalls    int
	// ServerRequests is what the scripted summarizer received, a check on
	// LLMCalls.
	ServerRequests int
	CacheHits      int
	Extractive     int
	CompactTime    time.Duration
	FactsKept      int
	FactsTotal     int
	Lost           []string
	// FalseClaims are "Unresolved:" lines of the final context that are
	// not unresolved errors: errors fixed since they were written into a
	// checkpoint, or lines the summarizer took for errors.
	FalseClaims []string
	// FinalTokens is the size of the context at the last builder call.
	FinalTokens int
	// PrefixTokens is the prompt prefix each builder call shares with the
	// previous call's prompt, summed over the session (prefix.go says how
	// it is measured); ExtendingCalls counts the calls whose prompt starts
	// with the whole previous prompt.
	PrefixTokens   int
	ExtendingCalls int
	// final is that context.
	final []units.Unit
}

// Applied is how many compactions applied at least one op.
func (r Result) Applied() int {
	n := 0
	for _, c := range r.Compactions {
		if len(c.Ops) > 0 {
			n++
		}
	}
	return n
}

// PrefixShare is the share of the builder's input tokens that repeat the
// previous call's prompt from its start, in percent: what a provider's
// prompt cache can reuse.
func (r Result) PrefixShare() float64 {
	if r.InputTokens == 0 {
		return 0
	}
	return 100 * float64(r.PrefixTokens) / float64(r.InputTokens)
}

// CallsPerIteration is the compactor LLM calls per builder iteration.
func (r Result) CallsPerIteration() float64 {
	if r.Iterations == 0 {
		return 0
	}
	return float64(r.LLMCalls) / float64(r.Iterations)
}

// Report is a benchmark run.
type Report struct {
	Window, Threshold, Target int
	Iterations                int
	// SessionTokens is the size of everything the session produced: the
	// initial context plus every iteration's units.
	SessionTokens int
	Facts         []Fact
	Results       []Result
	Verdict       []Check
}

// Check is one tiered_adaptive target.
type Check struct {
	Target string
	Pass   bool
	Detail string
}

// Passed reports whether every target was met.
func (r Report) Passed() bool {
	for _, c := range r.Verdict {
		if !c.Pass {
			return false
		}
	}
	return len(r.Verdict) > 0
}

// Result returns the result of strategy s.
func (r Report) Result(s Strategy) (Result, bool) {
	for _, res := range r.Results {
		if res.Strategy == s {
			return res, true
		}
	}
	return Result{}, false
}

// ErrUnknownStrategy is returned for a strategy Run does not know.
var ErrUnknownStrategy = errors.New("unknown strategy")

// Run generates the session and replays it through each strategy.
func Run(ctx context.Context, o Options) (Report, error) {
	switch {
	case o.Window == 0:
		o.Window = DefaultWindow
	case o.Window < 0:
		return Report{}, fmt.Errorf("compaction benchmark: window must be positive, got %d", o.Window)
	}
	strategies := []Strategy{StrategyNone}
	for _, s := range o.Strategies {
		if !slices.Contains(Strategies, s) {
			return Report{}, fmt.Errorf("%w %q (want one of %s)", ErrUnknownStrategy, s, strategyList())
		}
		if !slices.Contains(strategies, s) {
			strategies = append(strategies, s)
		}
	}
	if len(o.Strategies) == 0 {
		strategies = Strategies
	}
	counter, err := tokens.New()
	if err != nil {
		return Report{}, err
	}
	sess, err := Generate(counter.Count)
	if err != nil {
		return Report{}, err
	}
	opts := compaction.DefaultOptions()
	rep := Report{
		Window: o.Window, Threshold: int(opts.PressureRatio * float64(o.Window)),
		Target: int(opts.TargetRatio * float64(o.Window)), Iterations: len(sess.Iterations),
		SessionTokens: units.Total(sess.Initial), Facts: sess.Facts,
	}
	for _, it := range sess.Iterations {
		rep.SessionTokens += it.Tokens()
	}

	srv := scriptllm.New(summarizerScript())
	baseURL, err := srv.Start()
	if err != nil {
		return Report{}, err
	}
	defer srv.Close()
	model, err := llm.New(llm.RoleSummarizer, llm.Endpoint{BaseURL: baseURL, Model: SummarizerModel, Timeout: 30 * time.Second}, nil, nil)
	if err != nil {
		return Report{}, err
	}
	for _, s := range strategies {
		before := len(srv.Requests())
		r := replayer{sess: sess, window: o.Window, threshold: rep.Threshold, target: rep.Target, counter: counter, model: model}
		res, err := r.run(ctx, s)
		if err != nil {
			return rep, fmt.Errorf("replay %s: %w", s, err)
		}
		res.ServerRequests = len(srv.Requests()) - before
		rep.Results = append(rep.Results, res)
	}
	none, _ := rep.Result(StrategyNone)
	for i := range rep.Results {
		if none.InputTokens > 0 {
			rep.Results[i].Reduction = 100 * (1 - float64(rep.Results[i].InputTokens)/float64(none.InputTokens))
		}
	}
	rep.Verdict = verdict(rep)
	return rep, nil
}

func strategyList() string {
	names := make([]string, len(Strategies))
	for i, s := range Strategies {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// replayer replays the session under one strategy.
type replayer struct {
	sess              Session
	window            int
	threshold, target int
	counter           *tokens.Counter
	model             summarizer.Model
}

// sessionID names the benchmark's session in the summarizer's calls.
const sessionID = "compact-bench"

func (r *replayer) run(ctx context.Context, s Strategy) (Result, error) {
	res := Result{Strategy: s, Iterations: len(r.sess.Iterations), Completed: true, FactsTotal: len(r.sess.Facts)}
	stored := slices.Clone(r.sess.Initial)
	var filesChanged []string
	var hist compaction.History
	var exec *summarizer.Executor
	opts := compaction.DefaultOptions()
	opts.Model = SummarizerModel

	switch s {
	case StrategyLegacy:
		opts.Mode = compaction.ModeLegacy
	case StrategyTiered:
		opts.Mode = compaction.ModeTiered
	case StrategyTieredAdaptive:
		opts.Mode = compaction.ModeTieredAdaptive
	}
	if s == StrategyLegacy || s == StrategyTiered || s == StrategyTieredAdaptive {
		store := newMemoryStore()
		// The summarizer's own defaults, from their one home.
		def := summarizer.DefaultConfig()
		exec = &summarizer.Executor{
			Model: r.model, Cache: store, Artifacts: store, Tokens: r.counter, Options: opts,
			SummaryPrompt: def.SummaryPrompt, MaxSummaryTokens: def.MaxSummaryTokens, CacheTTL: def.CacheTTL,
		}
	}
	var cache cacheReuse
	for k, it := range r.sess.Iterations {
		iteration := k + 1
		input := units.Total(stored)
		res.InputTokens += input
		cache.call(slices.Clone(stored), r.counter.Count)
		res.PrefixTokens, res.ExtendingCalls = cache.Reused, cache.Extending
		res.PeakTokens = max(res.PeakTokens, input)
		if input > r.window && res.Overflow == 0 {
			res.Overflow, res.Completed = iteration, false
		}
		if it.Done() {
			// The builder's last call: what it sees is what the facts
			// are checked against.
			res.Lost = CheckFacts(r.sess.Facts, stored)
			res.FalseClaims = FalseClaims(r.sess.Facts, stored)
			res.FactsKept = res.FactsTotal - len(res.Lost)
			res.FinalTokens, res.final = input, slices.Clone(stored)
			break
		}
		stored = append(stored, slices.Clone(it.Units)...)
		for _, f := range it.FilesChanged {
			if !slices.Contains(filesChanged, f) {
				filesChanged = append(filesChanged, f)
			}
		}
		// The builder asks for compaction when the context after a step
		// reaches the threshold (builder.State.analyzed).
		if units.Total(stored) < r.threshold || s == StrategyNone {
			continue
		}
		start := time.Now()
		var c Compaction
		var err error
		switch s {
		case StrategyTruncation:
			stored, c = truncate(stored, r.target, len(r.sess.Initial))
		default:
			stored, c, err = r.compact(ctx, exec, &hist, stored, filesChanged, iteration)
			if err != nil {
				return res, fmt.Errorf("iteration %d: %w", iteration, err)
			}
		}
		c.Iteration = iteration
		c.Elapsed = time.Since(start)
		res.CompactTime += c.Elapsed
		res.LLMCalls += c.LLMCalls
		res.CacheHits += c.CacheHits
		for _, a := range c.Applied {
			if a.How == "extractive" {
				res.Extractive++
			}
		}
		res.Compactions = append(res.Compactions, c)
	}
	return res, nil
}

// compact is one compaction.requested handled by the summarizer's own
// compaction step (summarizer.Executor.Compact: plan with the task's
// History, commit, apply with the facts it derives from the stored units
// and the files the builder knows it changed), the advisor off as by
// default; only the storage around it is in memory.
func (r *replayer) compact(ctx context.Context, exec *summarizer.Executor, hist *compaction.History,
	stored []units.Unit, filesChanged []string, iteration int) ([]units.Unit, Compaction, error) {
	c := Compaction{Ops: map[string]int{}, Skipped: map[string]int{}}
	// What the builder asks for (builder.State.analyzed), with the
	// benchmark's turn numbering: one turn per iteration.
	req := events.CompactionRequestedData{
		TaskID: r.sess.Task.ID, Goal: r.sess.Task.ID + ": " + r.sess.Task.Title,
		ContextTokens: units.Total(stored), LimitTokens: r.window,
		Iteration: iteration, Turn: iteration, FilesChanged: slices.Clone(filesChanged),
	}
	step, err := exec.Compact(ctx, sessionID, req, stored, hist, false)
	if err != nil {
		return stored, c, err
	}
	plan, out := step.Plan, step.Outcome
	c.Tier, c.TokensBefore, c.TargetMet = string(plan.Tier), plan.TokensBefore, plan.TargetMet
	for _, sk := range plan.Skipped {
		c.Skipped[string(sk.Reason)]++
	}
	if len(plan.Ops) == 0 {
		c.TokensAfter = plan.TokensBefore
		return stored, c, nil
	}
	c.LLMCalls, c.CacheHits = out.LLMCalls, out.CacheHits
	for _, a := range out.Applied {
		c.Ops[a.Op+"/"+a.How]++
		c.Applied = append(c.Applied, AppliedOp{Unit: a.Unit, Op: a.Op, How: a.How, TokensBefore: a.TokensBefore, TokensAfter: a.TokensAfter})
	}
	c.TokensAfter = units.Total(out.Units)
	return out.Units, c, nil
}
