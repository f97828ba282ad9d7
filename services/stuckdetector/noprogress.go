package stuckdetector

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// noProgressConfidence comes from the original patterns (docs/design-origins.md, "The three original patterns"), the lowest: a quiet window may still be
// legitimate exploration.
const noProgressConfidence = 0.8

// NoProgress fires when NoProgressSpan iterations in a row (capped to the
// Window) made no progress, judged by outcome only (what came back, not what
// the model asked for, and never by the mere absence of writes), and none of
// them claimed completion (a claim is progress of a kind: the critic judges
// it, and its verdict decides what happens next):
//
//  1. the workspace did not change (no files changed, the hash stayed the
//     same) and nothing new came back after the span's first iteration:
//     every call got an answer that an earlier call in the window had got
//     (the same output, timings and ids aside; the same error line,
//     whichever command printed it). Reading a file not read before, or
//     running a command with new output, is learning, which is how nearly
//     every task starts, however long it takes; the same reads cycling
//     with nothing new are a stall. A poll whose answer changes (a
//     rollout, a CI job, a database starting) brings something new each
//     time, so it is not one either. "Earlier" is within the window: a
//     cycle of four reads fills a window of eight with its two rounds, so
//     the stall it shows stays at the span (weak evidence on each
//     iteration) rather than growing past it;
//  2. the workspace changed, but every test run in the span reported the
//     same failing tests (same failed and passed counts, same names, same
//     failure text), from the start of the span to its end;
//  3. the workspace changed, but the same error (the same failure line,
//     whichever command printed it) was there at the start of the span, is
//     there at its end, and came back at least RepeatThreshold times, and no
//     call that produced it did anything else in between.
//
// Rules 2 and 3 need different attempts (more than one distinct call, or
// edits between the failures); one command re-run is circular_tools' and
// action_error_loop's to report. They also stay silent while the span keeps
// reaching files it had not touched before (in most of its iterations):
// building a feature file by file leaves an end-to-end test failing the
// same way until the last piece lands.
//
// Work that changes nothing for that long is usually a task too big to
// start on, and edits that leave the failure exactly as it was are a task
// the model cannot see into: decompose it, once the stall has gone on past
// the span (the evidence is strong); at the span itself, nudge.
type NoProgress struct{}

// Name implements Pattern.
func (NoProgress) Name() string { return "no_progress" }

// Detect implements Pattern.
func (p NoProgress) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	return p.detect(newMemo(), window, cfg)
}

func (p NoProgress) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	span := min(cfg.NoProgressSpan, cfg.Window)
	s := p.stall(m, window, span, 1, cfg)
	if s == nil {
		return nil
	}
	n := longestRun(span, len(window), func(k int) bool {
		// Past the span the failure must be there from the first
		// iteration counted: the edit that led to it was progress.
		t := p.stall(m, window, k, 0, cfg)
		if t != nil {
			s = t
		}
		return t != nil
	})
	return graded(s, events.ActionDecompose, n, span, countOf(n, "iteration")+" without progress")
}

// stall applies the rules to the last n records of window. Rules 2 and 3
// want the failure seen by the index lead of the span (1 allows one
// iteration before it: the span starts with the attempt that showed it).
func (p NoProgress) stall(m *memo, window []events.IterationRecord, n, lead int, cfg Config) *events.Signal {
	if len(window) < n {
		return nil
	}
	recent := window[len(window)-n:]
	for _, r := range recent {
		if r.ClaimedDone {
			return nil
		}
	}
	if s := p.unchangedWorkspace(m, window, n); s != nil {
		return s
	}
	if reachesNewFiles(recent) || (distinctCalls(m, recent) < 2 && !changedWithin(recent)) {
		return nil
	}
	if s := p.sameFailingTests(m, recent, lead, cfg); s != nil {
		return s
	}
	return p.sameError(m, recent, lead, cfg)
}

// unchangedWorkspace is rule 1, over the last n records of window.
func (p NoProgress) unchangedWorkspace(m *memo, window []events.IterationRecord, n int) *events.Signal {
	first := len(window) - n
	recent := window[first:]
	hash := ""
	var calls []events.ToolCall
	for _, r := range recent {
		if len(r.FilesChanged) > 0 {
			return nil
		}
		if r.WorkspaceHash != "" {
			if hash != "" && r.WorkspaceHash != hash {
				return nil
			}
			hash = r.WorkspaceHash
		}
		calls = append(calls, r.ToolCalls...)
	}
	if slices.Contains(m.learned(window)[first+1:], true) {
		return nil
	}

	newest := recent[len(recent)-1]
	evidence := iterationsOf(recent)
	workspace := "reported no workspace hash"
	if hash != "" {
		workspace = "the workspace hash stayed " + shortHash(hash)
	}
	activity := "no tool calls"
	if len(calls) > 0 {
		activity = fmt.Sprintf("%d tool calls (%s), none after iteration %d with an answer not seen before",
			len(calls), countNames(calls), recent[0].Iteration)
	}
	diag := fmt.Sprintf("%s changed no files and %s; %s", formatIterations(evidence), workspace, activity)
	if t := newest.Tests; t != nil && t.Failed > 0 {
		diag += "; tests still failing (" + describeFailingTests(t) + ")"
	}
	return p.signal(recent, diag)
}

// sameFailingTests is rule 2.
func (p NoProgress) sameFailingTests(m *memo, recent []events.IterationRecord, lead int, cfg Config) *events.Signal {
	var reports []int
	for i, r := range recent {
		if r.Tests != nil {
			reports = append(reports, i)
		}
	}
	if len(reports) < cfg.RepeatThreshold {
		return nil
	}
	// It must persist over the span, not just over its tail: seen by the
	// span's iteration lead and in its last two.
	if reports[0] > lead || reports[len(reports)-1] < len(recent)-2 {
		return nil
	}
	first := recent[reports[0]].Tests
	if first.Failed == 0 {
		return nil
	}
	want := testsKey(first)
	// The failure text is compared too, where the records have it: the same
	// test failing on a different assertion is the edits getting somewhere.
	wantText := ""
	for _, i := range reports {
		r := recent[i]
		if testsKey(r.Tests) != want {
			return nil
		}
		if text := failureSet(m, r.ToolCalls); text != "" {
			if wantText != "" && text != wantText {
				return nil
			}
			wantText = text
		}
	}
	diag := fmt.Sprintf("the same tests kept failing (%s) in %s across %s",
		describeFailingTests(first), formatIterations(iterationsOf(recent)), describeAttempts(m, recent))
	return p.signal(recent, diag)
}

// sameError is rule 3.
func (p NoProgress) sameError(m *memo, recent []events.IterationRecord, lead int, cfg Config) *events.Signal {
	newest := recent[len(recent)-1]
	for _, c := range newest.ToolCalls {
		f, failed := m.failureOf(c)
		if !failed {
			continue
		}
		var (
			at      []int               // records with the failure
			sources = map[string]bool{} // signatures that produced it
		)
		for i, r := range recent {
			for _, rc := range r.ToolCalls {
				if rf, ok := m.failureOf(rc); ok && rf.line == f.line {
					sources[m.callSignature(rc)] = true
					if len(at) == 0 || at[len(at)-1] != i {
						at = append(at, i)
					}
				}
			}
		}
		if len(at) < cfg.RepeatThreshold || at[0] > lead {
			continue
		}
		// A call that produced the error and then did something else
		// (passed, or failed another way) means it was fixed at least once.
		fixed := false
		for _, r := range recent[at[0]:] {
			for _, rc := range r.ToolCalls {
				if rf, failed := m.failureOf(rc); sources[m.callSignature(rc)] && (!failed || rf.line != f.line) {
					fixed = true
				}
			}
		}
		if fixed {
			continue
		}
		diag := fmt.Sprintf("%s kept reporting the same error (in %d of them) across %s: %q",
			formatIterations(iterationsOf(recent)), len(at), describeAttempts(m, recent), truncate(f.quote))
		return p.signal(recent, diag)
	}
	return nil
}

// signal is the ungraded signal; Detect grades it.
func (p NoProgress) signal(recent []events.IterationRecord, diag string) *events.Signal {
	return &events.Signal{
		Iteration:  recent[len(recent)-1].Iteration,
		Pattern:    p.Name(),
		Confidence: noProgressConfidence,
		Diagnosis:  diag,
		Evidence:   iterationsOf(recent),
	}
}

// learned reports for each record of window whether one of its calls got
// an answer (answerKey) that no call before it in the window had got.
func (m *memo) learned(window []events.IterationRecord) []bool {
	seen := map[string]bool{}
	out := make([]bool, len(window))
	for i, r := range window {
		for _, c := range r.ToolCalls {
			k := m.answerKey(c)
			if !seen[k] {
				seen[k] = true
				out[i] = true
			}
		}
	}
	return out
}

// answerKey identifies what a call told the model: a failure by its failure
// line (the same error printed by another command says nothing new), a
// success by its output with timings, ids and absolute paths left out (a
// re-run that differs only in its duration says nothing new either, while a
// poll whose counts move does), and a silent success by the call itself.
func (m *memo) answerKey(c events.ToolCall) string {
	if f, failed := m.failureOf(c); failed {
		return "failed\x00" + f.line
	}
	if strings.TrimSpace(c.Output) == "" {
		return "quiet\x00" + m.callSignature(c)
	}
	return lookup(m.answers, c.Output, func(out string) string {
		out = stripNoise(out)
		// A duration is a digit followed by its unit or its decimal point.
		if runBefore(out, 1, isDigit, "numsh.\xc2") {
			out = durationRE.ReplaceAllString(out, "<duration>")
		}
		return "ok\x00" + out
	})
}

// reachesNewFiles reports whether most of the records changed a file that no
// earlier record of theirs had changed: building something piece by piece.
func reachesNewFiles(records []events.IterationRecord) bool {
	touched := map[string]bool{}
	reaching := 0
	for _, r := range records {
		fresh := false
		for _, f := range r.FilesChanged {
			if !touched[f] {
				touched[f], fresh = true, true
			}
		}
		if fresh {
			reaching++
		}
	}
	return reaching*2 > len(records)
}

// changedWithin reports whether the workspace changed after the first of
// records (the first one's own change is what the span starts from).
func changedWithin(records []events.IterationRecord) bool {
	changed := workspaceChanges(records)
	return slices.Contains(changed[1:], true)
}

// distinctCalls counts the distinct call signatures of records.
func distinctCalls(m *memo, records []events.IterationRecord) int {
	set := map[string]bool{}
	for _, r := range records {
		for _, c := range r.ToolCalls {
			set[m.callSignature(c)] = true
		}
	}
	return len(set)
}

// failureSet is the sorted fingerprints of the failed calls, joined.
func failureSet(m *memo, calls []events.ToolCall) string {
	var fps []string
	for _, c := range calls {
		if f, failed := m.failureOf(c); failed {
			fps = append(fps, f.fingerprint)
		}
	}
	slices.Sort(fps)
	return strings.Join(fps, "\x00")
}

func describeFailingTests(t *events.TestResult) string {
	s := fmt.Sprintf("%d failed", t.Failed)
	if len(t.Failing) > 0 {
		s += ": " + truncate(strings.Join(t.Failing, ", "))
	}
	return s
}

// describeAttempts says what the model tried over records: "6 different
// calls and edits to parser.go in 3 iterations".
func describeAttempts(m *memo, records []events.IterationRecord) string {
	s := countOf(distinctCalls(m, records), "different call")
	var files []string
	edits := 0
	for _, r := range records {
		if len(r.FilesChanged) > 0 {
			edits++
		}
		for _, f := range r.FilesChanged {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	if edits > 0 {
		s += fmt.Sprintf(" and edits to %s in %s", truncate(strings.Join(files, ", ")), countOf(edits, "iteration"))
	}
	return s
}
