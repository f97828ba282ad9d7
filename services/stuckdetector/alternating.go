package stuckdetector

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Alternating is surest when the workspace itself flips between two states:
// each step undoes the one before.
const (
	alternatingFlipConfidence = 0.85
	alternatingConfidence     = 0.8
)

// Alternating fires when the last AlternatingSteps iterations (capped to the
// Window) ping-pong between two different things, A/B/A/B: edit X then
// revert X, read a then read b then read a, claim done then re-run the same
// failing test. Two signs count, each on its own:
//
//   - the iterations' fingerprints alternate: the same calls with the same
//     args and the same results (failures compared by fingerprint, so that
//     timings do not hide the repeat), or, for a turn without calls, the
//     same text;
//   - the workspace hash alternates between two values: every other step
//     puts the workspace back where it was. That is strong evidence on its
//     own, whatever the calls look like.
//
// It stays silent for the normal read-edit-test cycle (the edits differ, so
// the fingerprints do), polling two things whose output changes, and a
// change tried once and reverted (the hash goes A, A, B, B, not A, B, A, B).
// Re-reading files after a compaction is legitimate (the context lost them),
// so a fingerprint alternation is only counted from the newest compaction
// on; a flipping workspace is counted across it.
//
// The model is steering by the last result alone, undoing what it did
// because of what the step before said. A nudge that names both states gives
// it the picture it lacks; pruning would remove half of that picture. The
// evidence is strong once the ping-pong runs past AlternatingSteps; the
// builder, which never nudges a task twice, then climbs its ladder.
type Alternating struct{}

// Name implements Pattern.
func (Alternating) Name() string { return "alternating" }

// Detect implements Pattern.
func (p Alternating) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	return p.detect(newMemo(), window, cfg)
}

func (p Alternating) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	steps := min(cfg.AlternatingSteps, cfg.Window)
	// A window too small for two full cycles can see no ping-pong.
	if steps < 4 || len(window) < steps {
		return nil
	}
	hashRun := alternationRunOf(len(window), func(i int) string { return window[i].WorkspaceHash })

	from := 0
	for i := len(window) - 1; i >= 0; i-- {
		if window[i].Compacted {
			from = i
			break
		}
	}
	// Fingerprints are asked for newest first and only as far back as the
	// alternation goes: a window that is not ping-ponging needs three.
	fpRun := alternationRunOf(len(window)-from, func(i int) string { return m.iterationFingerprint(window[from+i]) })

	run, confidence := fpRun, alternatingConfidence
	if hashRun >= steps {
		run, confidence = max(hashRun, fpRun), alternatingFlipConfidence
	} else if fpRun < steps {
		return nil
	}
	recent := window[len(window)-run:]
	a, b := recent[len(recent)-2], recent[len(recent)-1]
	evidence := iterationsOf(recent)
	diag := fmt.Sprintf("%s ping-pong between A (%s) and B (%s)",
		formatIterations(evidence), describeStep(a), describeStep(b))
	if hashRun >= steps {
		diag += fmt.Sprintf("; the workspace flips between %s and %s", shortHash(a.WorkspaceHash), shortHash(b.WorkspaceHash))
	} else {
		diag += " with the same results each time"
	}
	return graded(&events.Signal{
		Iteration:  b.Iteration,
		Pattern:    p.Name(),
		Confidence: confidence,
		Diagnosis:  diag,
		Evidence:   evidence,
	}, events.ActionNudge, run, steps, countOf(run, "step")+" of ping-pong")
}

// alternationRun is the length of the trailing run of keys that alternates
// between two different non-empty values (x, y, x, y, ...), or 0 when the
// last two keys are not two different values.
func alternationRun(keys []string) int {
	return alternationRunOf(len(keys), func(i int) string { return keys[i] })
}

// alternationRunOf is alternationRun over n keys that key(i) gives, asking
// for each at most once, newest first, and for none older than the run.
func alternationRunOf(n int, key func(i int) string) int {
	if n < 2 {
		return 0
	}
	// x and y are the keys one and two places after i.
	x, y := key(n-2), key(n-1)
	if y == "" || x == "" || y == x {
		return 0
	}
	run := 2
	for i := n - 3; i >= 0; i-- {
		k := key(i)
		if k != y {
			break
		}
		run++
		x, y = k, x
	}
	return run
}

// iterationFingerprint identifies what an iteration did: its calls with
// their args and outcomes (sorted: the order of parallel calls is not
// meaningful), or, without calls, its normalized text; "" for an empty
// record, which matches nothing.
func (m *memo) iterationFingerprint(r events.IterationRecord) string {
	if len(r.ToolCalls) > 0 {
		fp := make([]string, len(r.ToolCalls))
		for i, c := range r.ToolCalls {
			fp[i] = m.callSignature(c) + "\x00" + m.outcomeOf(c)
		}
		slices.Sort(fp)
		return "calls\x00" + strings.Join(fp, "\x01")
	}
	if tokens := m.textTokens(r.AssistantText); len(tokens) > 0 {
		return "text\x00" + strings.Join(tokens, " ")
	}
	return ""
}

// describeStep is one short line for what an iteration did.
func describeStep(r events.IterationRecord) string {
	if len(r.ToolCalls) > 0 {
		return truncate(describeCalls(r.ToolCalls))
	}
	return fmt.Sprintf("no tool calls: %q", truncate(strings.TrimSpace(r.AssistantText)))
}
