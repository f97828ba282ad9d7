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
// into parts that fit. Two compactions back to back may still be bad luck,
// so at the threshold the answer is a nudge; a further compaction with
// still no progress is strong evidence.
type CompactionLoop struct{}

// Name implements Pattern.
func (CompactionLoop) Name() string { return "compaction_loop" }

// Detect implements Pattern.
func (p CompactionLoop) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	return p.detect(newMemo(), window, cfg)
}

func (p CompactionLoop) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	if len(window) == 0 || !window[len(window)-1].Compacted {
		return nil
	}
	loop, ok := compactionsWithoutProgress(m, window, cfg.CompactionRepeats)
	if !ok {
		return nil
	}
	count := longestRun(cfg.CompactionRepeats, len(window), func(k int) bool {
		l, ok := compactionsWithoutProgress(m, window, k)
		if ok {
			loop = l
		}
		return ok
	})
	stretch := window[loop.first:]
	newest := stretch[len(stretch)-1]
	var at []int
	var sizes []string
	for _, i := range loop.compactions {
		at = append(at, window[i].Iteration)
		if t := window[i].ContextTokens; t > 0 {
			sizes = append(sizes, strconv.Itoa(t))
		}
	}
	diag := fmt.Sprintf("compacted in %s with no progress since the first: no files changed", formatIterations(at))
	if loop.hash != "" {
		diag += ", the workspace hash stayed " + shortHash(loop.hash)
	}
	if loop.calls > 0 {
		diag += fmt.Sprintf(", %d of %d calls repeated earlier ones (%s)", loop.calls-loop.fresh, loop.calls, loop.names)
	} else {
		diag += ", no tool calls"
	}
	if len(sizes) == len(at) {
		diag += "; context at each compaction: " + strings.Join(sizes, ", ") + " tokens"
	}
	return graded(&events.Signal{
		Iteration:  newest.Iteration,
		Pattern:    p.Name(),
		Confidence: compactionLoopConfidence,
		Diagnosis:  diag,
		Evidence:   iterationsOf(stretch),
	}, events.ActionDecompose, count, cfg.CompactionRepeats, countOf(count, "compaction")+" without progress")
}

// compactionLoop is what compactionsWithoutProgress found.
type compactionLoop struct {
	compactions  []int // indices into the window, ascending
	first        int   // the first of them
	hash         string
	calls, fresh int
	names        string // the calls by tool name
}

// compactionsWithoutProgress looks at the last k compactions of window
// (whose newest record is one) and reports whether nothing progressed from
// the first of them to the end of the window.
func compactionsWithoutProgress(m *memo, window []events.IterationRecord, k int) (compactionLoop, bool) {
	var loop compactionLoop
	for i := len(window) - 1; i >= 0 && len(loop.compactions) < k; i-- {
		if window[i].Compacted {
			loop.compactions = append(loop.compactions, i)
		}
	}
	if len(loop.compactions) < k {
		return loop, false
	}
	slices.Reverse(loop.compactions)
	loop.first = loop.compactions[0]
	stretch := window[loop.first:]

	tests := ""
	for _, r := range stretch {
		if len(r.FilesChanged) > 0 || r.ClaimedDone {
			return loop, false
		}
		if r.WorkspaceHash != "" {
			if loop.hash != "" && r.WorkspaceHash != loop.hash {
				return loop, false
			}
			loop.hash = r.WorkspaceHash
		}
		if r.Tests != nil {
			k := testsKey(r.Tests)
			if tests != "" && k != tests {
				return loop, false
			}
			tests = k
		}
	}

	seen := map[string]bool{}
	for _, r := range window[:loop.first] {
		for _, c := range r.ToolCalls {
			seen[m.callSignature(c)+"\x00"+m.outcomeOf(c)] = true
		}
	}
	var calls []events.ToolCall
	for _, r := range stretch {
		for _, c := range r.ToolCalls {
			k := m.callSignature(c) + "\x00" + m.outcomeOf(c)
			if !seen[k] {
				loop.fresh++
				seen[k] = true
			}
			calls = append(calls, c)
		}
	}
	loop.calls = len(calls)
	if loop.fresh*2 > loop.calls {
		return loop, false
	}
	loop.names = countNames(calls)
	return loop, true
}
