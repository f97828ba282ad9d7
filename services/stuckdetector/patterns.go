package stuckdetector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Confidences are ADR-003's. Repetition of the whole response is the surest
// sign of a loop; a quiet window may still be legitimate exploration, hence
// the lowest.
const (
	repetitiveOutputConfidence = 0.9
	circularToolsConfidence    = 0.85
	noProgressConfidence       = 0.8
)

// maxQuoteRunes bounds quoted text and call signatures in a diagnosis: a
// write_file call's args can be a whole file, and the diagnosis goes into
// logs, events and the pruner's prompt.
const maxQuoteRunes = 100

// RepetitiveOutput fires when the last RepeatThreshold responses are the same
// response: near-identical assistant text and the same tool calls with the
// same results. The model is cycling through what it already said, so the
// context (not the task) is the problem: prune it.
type RepetitiveOutput struct{}

// Name implements Pattern.
func (RepetitiveOutput) Name() string { return "repetitive_output" }

// Detect implements Pattern.
func (p RepetitiveOutput) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	n := cfg.RepeatThreshold
	if len(window) < n {
		return nil
	}
	recent := window[len(window)-n:]
	newest := recent[n-1]
	newestShingles := shingles(textTokens(newest.AssistantText))
	if len(newestShingles) == 0 {
		return nil
	}
	// Results are part of the response being repeated: the same "Checking
	// the build status." over a poll whose output changes is the model
	// reacting to a changing world, not a loop.
	newestCalls := callFingerprint(newest.ToolCalls)
	minSim := 1.0
	for _, r := range recent[:n-1] {
		sh := shingles(textTokens(r.AssistantText))
		if len(sh) == 0 {
			return nil
		}
		sim := jaccard(sh, newestShingles)
		if sim < cfg.SimilarityThreshold {
			return nil
		}
		minSim = min(minSim, sim)
		if !slices.Equal(callFingerprint(r.ToolCalls), newestCalls) {
			return nil
		}
	}

	similarity := "the same"
	if minSim < 1 {
		similarity = fmt.Sprintf("near-identical (similarity %.2f)", minSim)
	}
	calls := "no tool calls"
	if len(newest.ToolCalls) > 0 {
		calls = "the same tool calls and results: " + describeCalls(newest.ToolCalls)
	}
	evidence := iterationsOf(recent)
	return &events.Signal{
		Iteration:  newest.Iteration,
		Pattern:    p.Name(),
		Confidence: repetitiveOutputConfidence,
		Action:     events.ActionPrune,
		Diagnosis: fmt.Sprintf("%s assistant text %d times in %s (%q) with %s",
			similarity, n, formatIterations(evidence), truncate(strings.TrimSpace(newest.AssistantText)), calls),
		Evidence: evidence,
	}
}

// NoProgress fires when NoProgressSpan iterations in a row (capped to the
// Window) made no progress, judged by outcome rather than by what the model
// asked for, and none of them claimed completion (a claim is progress of a
// kind: the critic judges it, and its verdict decides what happens next):
//
//  1. the workspace did not change: no files changed and the hash stayed
//     the same, whatever the calls (ADR-003's original rule), unless a
//     call made again got a different answer: a poll whose answer changes
//     (a rollout, a CI job, a database starting) is watching progress
//     happen, not stalling;
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
// the model cannot see into: decompose it.
type NoProgress struct{}

// Name implements Pattern.
func (NoProgress) Name() string { return "no_progress" }

// Detect implements Pattern.
func (p NoProgress) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	span := min(cfg.NoProgressSpan, cfg.Window)
	if len(window) < span {
		return nil
	}
	recent := window[len(window)-span:]
	for _, r := range recent {
		if r.ClaimedDone {
			return nil
		}
	}
	if s := p.unchangedWorkspace(recent); s != nil {
		return s
	}
	if reachesNewFiles(recent) || (distinctCalls(recent) < 2 && !changedWithin(recent)) {
		return nil
	}
	if s := p.sameFailingTests(recent, cfg); s != nil {
		return s
	}
	return p.sameError(recent, cfg)
}

// unchangedWorkspace is rule 1.
func (p NoProgress) unchangedWorkspace(recent []events.IterationRecord) *events.Signal {
	if answersChanged(recent) {
		return nil
	}
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

	newest := recent[len(recent)-1]
	evidence := iterationsOf(recent)
	workspace := "reported no workspace hash"
	if hash != "" {
		workspace = "the workspace hash stayed " + shortHash(hash)
	}
	activity := "no tool calls"
	if len(calls) > 0 {
		activity = fmt.Sprintf("%d tool calls (%s)", len(calls), countNames(calls))
	}
	diag := fmt.Sprintf("%s changed no files and %s; %s", formatIterations(evidence), workspace, activity)
	if t := newest.Tests; t != nil && t.Failed > 0 {
		diag += "; tests still failing (" + describeFailingTests(t) + ")"
	}
	return p.signal(recent, diag)
}

// sameFailingTests is rule 2.
func (p NoProgress) sameFailingTests(recent []events.IterationRecord, cfg Config) *events.Signal {
	var reports []int
	for i, r := range recent {
		if r.Tests != nil {
			reports = append(reports, i)
		}
	}
	if len(reports) < cfg.RepeatThreshold {
		return nil
	}
	// It must persist over the span, not just over its tail: seen in its
	// first two iterations and in its last two.
	if reports[0] > 1 || reports[len(reports)-1] < len(recent)-2 {
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
		if text := failureSet(r.ToolCalls); text != "" {
			if wantText != "" && text != wantText {
				return nil
			}
			wantText = text
		}
	}
	diag := fmt.Sprintf("the same tests kept failing (%s) in %s across %s",
		describeFailingTests(first), formatIterations(iterationsOf(recent)), describeAttempts(recent))
	return p.signal(recent, diag)
}

// sameError is rule 3.
func (p NoProgress) sameError(recent []events.IterationRecord, cfg Config) *events.Signal {
	newest := recent[len(recent)-1]
	for _, c := range newest.ToolCalls {
		f, failed := failureOf(c)
		if !failed {
			continue
		}
		var (
			at      []int               // records with the failure
			sources = map[string]bool{} // signatures that produced it
		)
		for i, r := range recent {
			for _, rc := range r.ToolCalls {
				if rf, ok := failureOf(rc); ok && rf.line == f.line {
					sources[callSignature(rc)] = true
					if len(at) == 0 || at[len(at)-1] != i {
						at = append(at, i)
					}
				}
			}
		}
		if len(at) < cfg.RepeatThreshold || at[0] > 1 {
			continue
		}
		// A call that produced the error and then did something else
		// (passed, or failed another way) means it was fixed at least once.
		fixed := false
		for _, r := range recent[at[0]:] {
			for _, rc := range r.ToolCalls {
				if rf, failed := failureOf(rc); sources[callSignature(rc)] && (!failed || rf.line != f.line) {
					fixed = true
				}
			}
		}
		if fixed {
			continue
		}
		diag := fmt.Sprintf("%s kept reporting the same error (in %d of them) across %s: %q",
			formatIterations(iterationsOf(recent)), len(at), describeAttempts(recent), truncate(f.quote))
		return p.signal(recent, diag)
	}
	return nil
}

func (p NoProgress) signal(recent []events.IterationRecord, diag string) *events.Signal {
	return &events.Signal{
		Iteration:  recent[len(recent)-1].Iteration,
		Pattern:    p.Name(),
		Confidence: noProgressConfidence,
		Action:     events.ActionDecompose,
		Diagnosis:  diag,
		Evidence:   iterationsOf(recent),
	}
}

// answersChanged reports whether some call made more than once in records
// got a different outcome than the time before.
func answersChanged(records []events.IterationRecord) bool {
	last := map[string]string{}
	for _, r := range records {
		for _, c := range r.ToolCalls {
			sig, out := callSignature(c), outcomeOf(c)
			if prev, ok := last[sig]; ok && prev != out {
				return true
			}
			last[sig] = out
		}
	}
	return false
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
func distinctCalls(records []events.IterationRecord) int {
	set := map[string]bool{}
	for _, r := range records {
		for _, c := range r.ToolCalls {
			set[callSignature(c)] = true
		}
	}
	return len(set)
}

// testsKey identifies a test outcome: the counts and the failing names as a
// set.
func testsKey(t *events.TestResult) string {
	names := slices.Clone(t.Failing)
	slices.Sort(names)
	return fmt.Sprintf("%d/%d/%s", t.Passed, t.Failed, strings.Join(names, "\x00"))
}

// failureSet is the sorted fingerprints of the failed calls, joined.
func failureSet(calls []events.ToolCall) string {
	var fps []string
	for _, c := range calls {
		if f, failed := failureOf(c); failed {
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
func describeAttempts(records []events.IterationRecord) string {
	s := countOf(distinctCalls(records), "different call")
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

// countOf is "1 call" or "3 calls".
func countOf(n int, noun string) string {
	if n != 1 {
		noun += "s"
	}
	return fmt.Sprintf("%d %s", n, noun)
}

// CircularTools fires when the newest iteration makes a tool call that was
// already made RepeatThreshold-1 times since the workspace last changed, each
// time with the same result. Calls need not be consecutive, so a cycle of
// reads over a small set of files (A,B,A,B,A) fires too. The model keeps
// asking for what its context already holds: prune the context.
//
// It stays silent for a command re-run after a write (the workspace changed
// in between), for polling whose output changes (the result differs) and
// for the same edit applied to different files (the args differ).
type CircularTools struct{}

// Name implements Pattern.
func (CircularTools) Name() string { return "circular_tools" }

// Detect implements Pattern.
func (p CircularTools) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	if len(window) == 0 {
		return nil
	}
	last := len(window) - 1
	stretch := unchangedStretch(window)
	if len(stretch) == 0 {
		return nil
	}
	sigs := signatures(stretch)

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
	return &events.Signal{
		Iteration:  window[last].Iteration,
		Pattern:    p.Name(),
		Confidence: circularToolsConfidence,
		Action:     events.ActionPrune,
		Diagnosis:  fmt.Sprintf("%s in %s with no workspace change", what, formatIterations(bestIters)),
		Evidence:   bestIters,
	}
}

// unchangedStretch is the trailing run of records in which the workspace did
// not change, or nil when the newest record changed it. A change in the
// newest iteration may have come after its calls, so the model acted on
// what it saw: not a loop. The same caution excludes any iteration that
// changed something from the stretch.
func unchangedStretch(window []events.IterationRecord) []events.IterationRecord {
	if len(window) == 0 {
		return nil
	}
	changed := workspaceChanges(window)
	last := len(window) - 1
	if changed[last] {
		return nil
	}
	start := last
	for start > 0 && !changed[start-1] {
		start--
	}
	return window[start:]
}

// signatures is the call signature of every call of every record, computed
// once: canonicalizing args decodes JSON.
func signatures(records []events.IterationRecord) [][]string {
	sigs := make([][]string, len(records))
	for i, r := range records {
		sigs[i] = make([]string, len(r.ToolCalls))
		for j, c := range r.ToolCalls {
			sigs[i][j] = callSignature(c)
		}
	}
	return sigs
}

// repeatsOf counts, newest first, the calls with signature sig in stretch
// (sigs holds the signature of each call) whose outcome (as key tells it)
// is the newest such call's; the first different outcome ends the count,
// because the model may have been right to look again. It returns the
// count, the iterations involved (ascending) and the index of the record of
// the oldest counted call.
func repeatsOf(stretch []events.IterationRecord, sigs [][]string, sig string, key func(events.ToolCall) string) (count int, iters []int, first int) {
	var want string
	haveWant := false
	for i := len(stretch) - 1; i >= 0; i-- {
		calls := stretch[i].ToolCalls
		inRecord := false
		for j := len(calls) - 1; j >= 0; j-- {
			if sigs[i][j] != sig {
				continue
			}
			got := key(calls[j])
			if !haveWant {
				want, haveWant = got, true
			}
			if got != want {
				slices.Reverse(iters)
				return count, iters, first
			}
			count++
			inRecord = true
		}
		if inRecord {
			iters = append(iters, stretch[i].Iteration)
			first = i
		}
	}
	slices.Reverse(iters)
	return count, iters, first
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

// workspaceChanges reports for each record whether the workspace changed
// during it: it listed changed files, or its hash differs from the last hash
// reported before it. A change seen only by hash is attributed to the record
// that revealed it; for a newest-first walk that is the cautious choice.
func workspaceChanges(window []events.IterationRecord) []bool {
	changed := make([]bool, len(window))
	prev := ""
	for i, r := range window {
		changed[i] = len(r.FilesChanged) > 0
		if r.WorkspaceHash != "" {
			if prev != "" && r.WorkspaceHash != prev {
				changed[i] = true
			}
			prev = r.WorkspaceHash
		}
	}
	return changed
}

// callSignature identifies a call by what it asks for: its name and its args
// as canonical JSON (keys sorted), so that key order or spacing in the
// model's output does not hide a repeat. Missing, null and {} args are the
// same request.
func callSignature(c events.ToolCall) string {
	if args := canonicalArgs(c.Args); args != "" {
		return c.Name + " " + args
	}
	return c.Name
}

func canonicalArgs(raw json.RawMessage) string {
	trimmed := bytes.TrimSpace(raw)
	v, ok := decodeJSON(trimmed)
	if !ok {
		// Not JSON (a builder bug or a hand-written record): compare the
		// bytes as they are rather than lose the call.
		return string(trimmed)
	}
	// OpenAI-style APIs deliver arguments as a JSON string holding JSON;
	// unwrap it so both encodings of a call compare equal.
	if s, isString := v.(string); isString {
		if inner, ok := decodeJSON([]byte(s)); ok {
			v = inner
		}
	}
	switch a := v.(type) {
	case nil:
		return ""
	case map[string]any:
		if len(a) == 0 {
			return ""
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Diagnoses quote the args; `a < b` reads better than `a \u003c b`.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return string(trimmed)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// decodeJSON decodes exactly one JSON value, keeping numbers as written so
// that canonical args do not round large integers.
func decodeJSON(b []byte) (any, bool) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if dec.More() {
		return nil, false
	}
	return v, true
}

// outcomeKey identifies what a call returned.
func outcomeKey(c events.ToolCall) string {
	return c.Output + "\x00" + c.Error + "\x00" + strconv.Itoa(c.ExitCode)
}

// callFingerprint is the multiset of (signature, outcome) of calls, sorted
// because the order of parallel tool calls is not meaningful.
func callFingerprint(calls []events.ToolCall) []string {
	fp := make([]string, len(calls))
	for i, c := range calls {
		fp[i] = callSignature(c) + "\x00" + outcomeKey(c)
	}
	slices.Sort(fp)
	return fp
}

// textTokens normalizes text for comparison: lower case, words split at
// anything but letters and digits, and every run of digits replaced by 0 so
// that "attempt 3" and "attempt 4" are the same sentence.
func textTokens(s string) []string {
	fields := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	for i, f := range fields {
		var b strings.Builder
		inDigits := false
		for _, r := range f {
			if unicode.IsDigit(r) {
				if !inDigits {
					b.WriteByte('0')
				}
				inDigits = true
				continue
			}
			inDigits = false
			b.WriteRune(r)
		}
		fields[i] = b.String()
	}
	return fields
}

// shingles is the set of word 3-shingles of tokens. A text shorter than
// three words is one shingle, so short texts must match exactly.
func shingles(tokens []string) map[string]struct{} {
	set := map[string]struct{}{}
	if len(tokens) == 0 {
		return set
	}
	if len(tokens) < 3 {
		set[strings.Join(tokens, " ")] = struct{}{}
		return set
	}
	for i := 0; i+3 <= len(tokens); i++ {
		set[strings.Join(tokens[i:i+3], " ")] = struct{}{}
	}
	return set
}

// jaccard is |a∩b| / |a∪b|; 0 when both are empty.
func jaccard(a, b map[string]struct{}) float64 {
	inter := 0
	for s := range a {
		if _, ok := b[s]; ok {
			inter++
		}
	}
	union := len(a) + len(b) - inter
	if union == 0 {
		return 0
	}
	return float64(inter) / float64(union)
}

func iterationsOf(records []events.IterationRecord) []int {
	its := make([]int, len(records))
	for i, r := range records {
		its[i] = r.Iteration
	}
	return its
}

// formatIterations renders ascending iterations as "iteration 4",
// "iterations 4-6" or "iterations 2, 4 and 7".
func formatIterations(its []int) string {
	switch len(its) {
	case 0:
		return "no iterations"
	case 1:
		return "iteration " + strconv.Itoa(its[0])
	}
	contiguous := true
	for i := 1; i < len(its); i++ {
		if its[i] != its[i-1]+1 {
			contiguous = false
			break
		}
	}
	if contiguous {
		return fmt.Sprintf("iterations %d-%d", its[0], its[len(its)-1])
	}
	parts := make([]string, len(its)-1)
	for i, it := range its[:len(its)-1] {
		parts[i] = strconv.Itoa(it)
	}
	return fmt.Sprintf("iterations %s and %d", strings.Join(parts, ", "), its[len(its)-1])
}

// describeCalls lists the distinct signatures of calls in order.
func describeCalls(calls []events.ToolCall) string {
	var sigs []string
	for _, c := range calls {
		if s := truncate(callSignature(c)); !slices.Contains(sigs, s) {
			sigs = append(sigs, s)
		}
	}
	return strings.Join(sigs, ", ")
}

// countNames summarizes calls by tool name, most used first: "read_file x4,
// bash x1".
func countNames(calls []events.ToolCall) string {
	counts := map[string]int{}
	var names []string
	for _, c := range calls {
		if counts[c.Name] == 0 {
			names = append(names, c.Name)
		}
		counts[c.Name]++
	}
	slices.SortStableFunc(names, func(a, b string) int {
		if d := counts[b] - counts[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s x%d", n, counts[n])
	}
	return strings.Join(parts, ", ")
}

// shortHash is enough of a hash to compare by eye, like git's short ids.
// The algorithm prefix the builder writes ("sha256:") would use up most of
// it and is the same on every hash, so it goes.
func shortHash(h string) string {
	if algo, hex, ok := strings.Cut(h, ":"); ok && algo != "" && hex != "" && !strings.ContainsAny(algo, " /") {
		h = hex
	}
	if r := []rune(h); len(r) > 12 {
		return string(r[:12])
	}
	return h
}

// truncate shortens s to maxQuoteRunes runes, marking the cut.
func truncate(s string) string {
	if utf8.RuneCountInString(s) <= maxQuoteRunes {
		return s
	}
	r := []rune(s)
	return string(r[:maxQuoteRunes]) + "..."
}
