package stuckdetector

import (
	"fmt"
	"slices"

	"github.com/ralphmesh/ralph/pkg/events"
)

const actionErrorLoopConfidence = 0.85

// ActionErrorLoop fires when the newest iteration makes a call (same tool,
// same args) that has now failed RepeatThreshold times in a row since the
// workspace last changed, whatever the error said each time. The text of a
// failure often changes from one try to the next: timestamps, durations,
// ids, temp paths, and messages that vary with the moment ("i/o timeout",
// then "connection reset by peer") while the call stays as wrong as it was.
// The same call failing again and again with nothing changed in between is
// a loop whatever it printed; circular_tools, which wants byte-identical
// results, cannot see it.
//
// Only retries with no change in between count: a test run after an edit
// is a new experiment even when it fails the same way, and a failure that
// survives edits for a whole span is no_progress's to report. The count
// ends at a success of the call (a flaky test passing once: trying again
// may be right) and at a failure whose progress counters moved ("1 of 3
// replicas available", then "2 of 3"): the world is moving, and polling it
// is not a loop.
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
	return p.detect(newMemo(), window, cfg)
}

func (p ActionErrorLoop) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	stretch := unchangedStretch(window)
	if len(stretch) == 0 {
		return nil
	}
	sigs := m.signatures(stretch)
	newest := stretch[len(stretch)-1]

	var best failureRun
	seen := map[string]bool{}
	for j, c := range newest.ToolCalls {
		sig := sigs[len(sigs)-1][j]
		if _, failed := m.failureOf(c); !failed || seen[sig] {
			continue
		}
		seen[sig] = true
		run := failuresInARow(m, stretch, sigs, sig)
		if run.count >= cfg.RepeatThreshold && run.count > best.count {
			best = run
		}
	}
	if best.count == 0 {
		return nil
	}
	what := fmt.Sprintf("failed the same way %d times", best.count)
	quote := fmt.Sprintf("%q", truncate(best.newest.quote))
	if best.kinds > 1 {
		what = fmt.Sprintf("failed %d times in a row", best.count)
		quote = fmt.Sprintf("%d different error texts, the newest %s", best.kinds, quote)
	}
	return graded(&events.Signal{
		Iteration:  newest.Iteration,
		Pattern:    p.Name(),
		Confidence: actionErrorLoopConfidence,
		Diagnosis: fmt.Sprintf("%s %s in %s with no workspace change in between: %s",
			truncate(best.sig), what, formatIterations(best.iters), quote),
		Evidence: best.iters,
	}, events.ActionNudge, best.count, cfg.RepeatThreshold, countOf(best.count, "failed call"))
}

// failureRun is the failures of one call in a row, newest first.
type failureRun struct {
	sig    string
	count  int
	iters  []int   // ascending
	newest failure // the newest failure
	kinds  int     // distinct failure fingerprints
}

// failuresInARow counts, newest first, the calls with signature sig in
// stretch (sigs holds the signature of each call) that failed, until one
// that succeeded or whose progress counters differ from those of the
// failure after it.
func failuresInARow(m *memo, stretch []events.IterationRecord, sigs [][]string, sig string) failureRun {
	run := failureRun{sig: sig}
	fingerprints := map[string]bool{}
	var after *failure
	for i := len(stretch) - 1; i >= 0; i-- {
		calls := stretch[i].ToolCalls
		inRecord := false
		for j := len(calls) - 1; j >= 0; j-- {
			if sigs[i][j] != sig {
				continue
			}
			f, failed := m.failureOf(calls[j])
			if !failed || (after != nil && f.progress != after.progress) {
				slices.Reverse(run.iters)
				run.kinds = len(fingerprints)
				return run
			}
			if after == nil {
				run.newest = f
			}
			after = &f
			fingerprints[f.fingerprint] = true
			run.count++
			inRecord = true
		}
		if inRecord {
			run.iters = append(run.iters, stretch[i].Iteration)
		}
	}
	slices.Reverse(run.iters)
	run.kinds = len(fingerprints)
	return run
}
