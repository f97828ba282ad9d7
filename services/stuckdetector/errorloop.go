package stuckdetector

import (
	"fmt"

	"github.com/ralphmesh/ralph/pkg/events"
)

const actionErrorLoopConfidence = 0.85

// ActionErrorLoop fires when the newest iteration makes a call (same tool,
// same args) that has now failed the same way RepeatThreshold times since
// the workspace last changed. "The same way" is the failure fingerprint:
// the error text with timestamps, durations, ids and absolute paths
// normalised away, so `npm install` failing with a new debug-log path each
// time is still the same failure. That is what circular_tools, which wants
// byte-identical results, cannot see.
//
// Only retries with no change in between count: a test run after an edit
// is a new experiment even when it fails the same way, and a failure that
// survives edits for a whole span is no_progress's to report. A different
// outcome of the same call (a flaky test passing once, a network error
// turning into another) ends the count as well: the world is moving, so
// trying again may be right.
//
// The action is a nudge, not pruning: the failure is the newest thing in the
// context, so pruning would not remove it; the model retries because it
// treats the error as transient, and naming the repeat and quoting the error
// is what tells it to change the call instead.
type ActionErrorLoop struct{}

// Name implements Pattern.
func (ActionErrorLoop) Name() string { return "action_error_loop" }

// Detect implements Pattern.
func (p ActionErrorLoop) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	stretch := unchangedStretch(window)
	if len(stretch) == 0 {
		return nil
	}
	sigs := signatures(stretch)
	newest := stretch[len(stretch)-1]

	var (
		bestSig   string
		bestQuote string
		bestCount int
		bestIters []int
	)
	seen := map[string]bool{}
	for j, c := range newest.ToolCalls {
		f, failed := failureOf(c)
		sig := sigs[len(sigs)-1][j]
		if !failed || seen[sig] {
			continue
		}
		seen[sig] = true
		count, iters, _ := repeatsOf(stretch, sigs, sig, outcomeOf)
		if count >= cfg.RepeatThreshold && count > bestCount {
			bestSig, bestQuote, bestCount, bestIters = sig, f.quote, count, iters
		}
	}
	if bestCount == 0 {
		return nil
	}
	return &events.Signal{
		Iteration:  newest.Iteration,
		Pattern:    p.Name(),
		Confidence: actionErrorLoopConfidence,
		Action:     events.ActionNudge,
		Diagnosis: fmt.Sprintf("%s failed the same way %d times in %s with no workspace change in between: %q",
			truncate(bestSig), bestCount, formatIterations(bestIters), truncate(bestQuote)),
		Evidence: bestIters,
	}
}
