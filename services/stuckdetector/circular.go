package stuckdetector

import (
	"fmt"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// circularToolsConfidence comes from the original patterns (docs/design-origins.md).
const circularToolsConfidence = 0.85

// CircularTools fires when the newest iteration makes a tool call that was
// already made RepeatThreshold-1 times since the workspace last changed, each
// time with the same result. Calls need not be consecutive, so a cycle of
// reads over a small set of files (A,B,A,B,A) fires too. The model keeps
// asking for what its context already holds: prune the context, once the
// call has come back more than RepeatThreshold times; at the threshold,
// nudge.
//
// It stays silent for a command re-run after a write (the workspace changed
// in between), for polling whose output changes (the result differs) and
// for the same edit applied to different files (the args differ).
type CircularTools struct{}

// Name implements Pattern.
func (CircularTools) Name() string { return "circular_tools" }

// Detect implements Pattern.
func (p CircularTools) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	return p.detect(newMemo(), window, cfg)
}

func (p CircularTools) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	if len(window) == 0 {
		return nil
	}
	last := len(window) - 1
	stretch := unchangedStretch(window)
	if len(stretch) == 0 {
		return nil
	}
	sigs := m.signatures(stretch)

	var (
		bestSig   string
		bestCount int
		bestIters []int
		bestFirst int // index in stretch of the record of the first occurrence
	)
	seen := map[string]bool{}
	for _, sig := range sigs[len(sigs)-1] {
		if seen[sig] {
			continue
		}
		seen[sig] = true
		count, iters, first := repeatsOf(stretch, sigs, sig, outcomeKey)
		if count >= cfg.RepeatThreshold && count > bestCount {
			bestSig, bestCount, bestIters, bestFirst = sig, count, iters, first
		}
	}
	if bestCount == 0 {
		return nil
	}

	what := fmt.Sprintf("%s called %d times", truncate(bestSig), bestCount)
	if cycle := cycleOver(sigs[bestFirst:]); len(cycle) > 1 {
		for i, s := range cycle {
			cycle[i] = truncate(s)
		}
		calls := 0
		for _, r := range stretch[bestFirst:] {
			calls += len(r.ToolCalls)
		}
		what = fmt.Sprintf("cycling over %s: %d calls", strings.Join(cycle, ", "), calls)
		bestIters = iterationsOf(stretch[bestFirst:])
	}
	return graded(&events.Signal{
		Iteration:  window[last].Iteration,
		Pattern:    p.Name(),
		Confidence: circularToolsConfidence,
		Diagnosis:  fmt.Sprintf("%s in %s with no workspace change", what, formatIterations(bestIters)),
		Evidence:   bestIters,
	}, events.ActionPrune, bestCount, cfg.RepeatThreshold, countOf(bestCount, "identical call"))
}

// cycleOver takes the call signatures of consecutive records and returns
// the distinct ones, in order of first appearance, when every call is to a
// signature made at least twice: the model is going round a small set rather
// than repeating one call among other work. Otherwise it returns nil.
func cycleOver(sigs [][]string) []string {
	counts := map[string]int{}
	var order []string
	for _, record := range sigs {
		for _, sig := range record {
			if counts[sig] == 0 {
				order = append(order, sig)
			}
			counts[sig]++
		}
	}
	for _, sig := range order {
		if counts[sig] < 2 {
			return nil
		}
	}
	return order
}
