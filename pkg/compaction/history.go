package compaction

import (
	"math"
	"slices"
)

// History is what the planner learns across iterations of one task: the
// ratios compactions realised, overshoot streaks and cooldowns, the calls
// already spent this iteration, the cached results and how often each unit
// was compressed. It is plain JSON so the Summarizer can keep it in Redis;
// the planner only reads it, and the methods below update it. Iterations
// are 1-based: 0 in AdvisorUsedIteration means never.
type History struct {
	Iteration int `json:"iteration"`
	// Ratios are realised output/input token ratios by label (or by op
	// name, as a fallback for labels without samples of their own).
	Ratios map[string][]float64 `json:"ratios,omitempty"`
	// Overshoots is the current streak of outputs over their target, by
	// label. A streak reaching OvershootLimit is a cooldown in itself.
	Overshoots map[string]int `json:"overshoots,omitempty"`
	// CooldownUntil is, by label, the first iteration the label may be
	// used again.
	CooldownUntil        map[string]int `json:"cooldown_until,omitempty"`
	CallsThisIteration   int            `json:"calls_this_iteration"`
	AdvisorUsedIteration int            `json:"advisor_used_iteration"`
	// Cached holds the cache keys (CacheKey) the caller has results for.
	Cached map[string]bool `json:"cached,omitempty"`
	// Compressed counts, by unit id, how often a unit was compacted.
	Compressed map[string]int `json:"compressed,omitempty"`
}

// maxRatioSamples bounds the realised ratios kept per label: recent
// outcomes describe the current compactor and content best.
const maxRatioSamples = 20

// overshootTolerance: an output up to this share over its target is not an
// overshoot; token counts of a rewritten text are not that precise.
const overshootTolerance = 0.10

// Label names the kind of work an op is, for ratios, cooldowns and cache
// keys: op and tool for tool ops, op and lane for narrative ones, the op
// alone for checkpoint merges.
func Label(op OpKind, tool string, lane Lane) string {
	switch op {
	case OpCheckpointMerge:
		return string(op)
	case OpCompactToolArgs, OpCompactToolOutput, OpReplaceWithPointer:
		if tool != "" {
			return string(op) + ":" + tool
		}
	}
	return string(op) + ":" + string(lane)
}

// realised returns the mean and the best (lowest) ratio realised for label,
// falling back to the op's samples; ok is false without any.
func (h History) realised(label string, op OpKind) (mean, best float64, ok bool) {
	samples := h.Ratios[label]
	if len(samples) == 0 {
		samples = h.Ratios[string(op)]
	}
	sum, n := 0.0, 0
	best = math.Inf(1)
	for _, r := range samples {
		if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
			continue
		}
		sum += r
		n++
		best = min(best, r)
	}
	if n == 0 {
		return 0, 0, false
	}
	return sum / float64(n), best, true
}

func (h History) coolingDown(label string, opts Options) bool {
	return h.Iteration < h.CooldownUntil[label] || h.Overshoots[label] >= opts.OvershootLimit
}

// StartIteration moves History to iteration n: the per-iteration call count
// starts again and expired cooldowns are dropped.
func (h *History) StartIteration(n int) {
	if n != h.Iteration {
		h.Iteration = n
		h.CallsThisIteration = 0
	}
	for label, until := range h.CooldownUntil {
		if until <= n {
			delete(h.CooldownUntil, label)
		}
	}
}

// Commit records that the plan r is being carried out: its LLM calls count
// against this iteration's budget, and a consulted advisor is not asked
// again this iteration.
func (h *History) Commit(r Result) {
	h.CallsThisIteration += r.LLMCalls
	if r.Advisor.Called {
		h.AdvisorUsedIteration = h.Iteration
	}
}

// RecordOutcome records what executing op produced: outTokens tokens. The
// realised ratio feeds the feasibility gate; an output more than 10% over
// op.OutputTokens extends the label's overshoot streak, and a streak of
// opts.OvershootLimit starts a cooldown of opts.CooldownIterations
// iterations; an output on target ends the streak.
func (h *History) RecordOutcome(op Op, outTokens int, opts Options) {
	// A pointer's size is set by the executor, not realised by a compactor.
	if op.Op != OpReplaceWithPointer && op.Tokens > 0 {
		if h.Ratios == nil {
			h.Ratios = map[string][]float64{}
		}
		rs := append(slices.Clone(h.Ratios[op.Label]), float64(outTokens)/float64(op.Tokens))
		if len(rs) > maxRatioSamples {
			rs = rs[len(rs)-maxRatioSamples:]
		}
		h.Ratios[op.Label] = rs
	}
	if float64(outTokens) > float64(op.OutputTokens)*(1+overshootTolerance) {
		if h.Overshoots == nil {
			h.Overshoots = map[string]int{}
		}
		h.Overshoots[op.Label]++
		if h.Overshoots[op.Label] >= opts.OvershootLimit {
			if h.CooldownUntil == nil {
				h.CooldownUntil = map[string]int{}
			}
			h.CooldownUntil[op.Label] = h.Iteration + opts.CooldownIterations + 1
			delete(h.Overshoots, op.Label)
		}
	} else {
		delete(h.Overshoots, op.Label)
	}
	if op.Op != OpCheckpointMerge {
		if h.Compressed == nil {
			h.Compressed = map[string]int{}
		}
		h.Compressed[op.Unit]++
	}
}
