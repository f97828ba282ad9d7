package stuckdetector

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

const compactionLoopConfidence = 0.88

// CompactionLoop fires when the newest iteration is the CompactionRepeats-th
// compaction in the window (a record with compacted=true: its context was
// compacted for it) and nothing progressed from the first of them to now:
// no files changed, the workspace hash and the test results stayed the
// same, no completion was claimed, and at most half of the calls brought
// something new (a call, with its result, not made earlier in the window).
//
// The usual shape is thrash: the context sits near its limit, each
// compaction frees a little, and the model spends what it freed re-reading
// what the compaction summarised away, until the next compaction. A
// compaction followed by exploration of files not read before, or by edits,
// is the orchestrator working as designed and does not fire.
//
// What the task needs does not fit in the context window; pruning cannot
// fix that and another compaction is what just failed: decompose the task
// into parts that fit.
type CompactionLoop struct{}

// Name implements Pattern.
func (CompactionLoop) Name() string { return "compaction_loop" }

// Detect implements Pattern.
func (p CompactionLoop) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	if len(window) == 0 || !window[len(window)-1].Compacted {
		return nil
	}
	var compactions []int // indices, newest first until reversed below
	for i := len(window) - 1; i >= 0 && len(compactions) < cfg.CompactionRepeats; i-- {
		if window[i].Compacted {
			compactions = append(compactions, i)
		}
	}
	if len(compactions) < cfg.CompactionRepeats {
		return nil
	}
	first := compactions[len(compactions)-1]
	stretch := window[first:]

	hash, tests := "", ""
	for _, r := range stretch {
		if len(r.FilesChanged) > 0 || r.ClaimedDone {
			return nil
		}
		if r.WorkspaceHash != "" {
			if hash != "" && r.WorkspaceHash != hash {
				return nil
			}
			hash = r.WorkspaceHash
		}
		if r.Tests != nil {
			k := testsKey(r.Tests)
			if tests != "" && k != tests {
				return nil
			}
			tests = k
		}
	}

	seen := map[string]bool{}
	for _, r := range window[:first] {
		for _, c := range r.ToolCalls {
			seen[callSignature(c)+"\x00"+outcomeOf(c)] = true
		}
	}
	var calls []events.ToolCall
	fresh := 0
	for _, r := range stretch {
		for _, c := range r.ToolCalls {
			k := callSignature(c) + "\x00" + outcomeOf(c)
			if !seen[k] {
				fresh++
				seen[k] = true
			}
			calls = append(calls, c)
		}
	}
	if fresh*2 > len(calls) {
		return nil
	}

	newest := stretch[len(stretch)-1]
	slices.Reverse(compactions)
	var at []int
	var sizes []string
	for _, i := range compactions {
		at = append(at, window[i].Iteration)
		if t := window[i].ContextTokens; t > 0 {
			sizes = append(sizes, strconv.Itoa(t))
		}
	}
	diag := fmt.Sprintf("compacted in %s with no progress since the first: no files changed", formatIterations(at))
	if hash != "" {
		diag += ", the workspace hash stayed " + shortHash(hash)
	}
	if len(calls) > 0 {
		diag += fmt.Sprintf(", %d of %d calls repeated earlier ones (%s)", len(calls)-fresh, len(calls), countNames(calls))
	} else {
		diag += ", no tool calls"
	}
	if len(sizes) == len(at) {
		diag += "; context at each compaction: " + strings.Join(sizes, ", ") + " tokens"
	}
	return &events.Signal{
		Iteration:  newest.Iteration,
		Pattern:    p.Name(),
		Confidence: compactionLoopConfidence,
		Action:     events.ActionDecompose,
		Diagnosis:  diag,
		Evidence:   iterationsOf(stretch),
	}
}
