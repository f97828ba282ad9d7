package stuckdetector

// This file is what the patterns of one Analyze share: the per-record work
// (canonical call signatures, failure fingerprints, normalised outputs,
// tokens and shingles of the assistant text) that every pattern, and every
// span a pattern tries, would otherwise redo for the same records. Decoding
// args and running the noise regexps over outputs was nine tenths of an
// analysis.
//
// The caches are keyed by the content they are computed from, never by a
// position in the window: a pattern looks at sub-slices of the window, and a
// value that depends only on its key cannot go stale or mix two records up.
// Each memoised value is exactly what the plain function returns.

import "github.com/ralphmesh/ralph/pkg/events"

// memo caches, for one analysis, what the patterns derive from records. It
// is not safe for concurrent use; Analyze makes one per call.
type memo struct {
	callSigs   map[string]map[string]string // tool name -> raw args -> callSignature
	failures   map[callResult]failureMemo   // failureOf
	outcomes   map[callResult]string        // outcomeOf
	answers    map[string]string            // answerKey of a successful output
	tokens     map[string][]string          // textTokens
	shingles   map[string]map[string]struct{}
	words      map[string]map[string]bool // contentWords
	proseTexts map[string]string          // prose
}

// callResult is what a call returned: all failureOf and outcomeOf look at.
type callResult struct {
	output, err string
	exitCode    int
}

type failureMemo struct {
	f      failure
	failed bool
}

func newMemo() *memo {
	return &memo{
		callSigs:   map[string]map[string]string{},
		failures:   map[callResult]failureMemo{},
		outcomes:   map[callResult]string{},
		answers:    map[string]string{},
		tokens:     map[string][]string{},
		shingles:   map[string]map[string]struct{}{},
		words:      map[string]map[string]bool{},
		proseTexts: map[string]string{},
	}
}

// lookup returns cache[k], computing and storing it on the first request.
func lookup[K comparable, V any](cache map[K]V, k K, compute func(K) V) V {
	if v, ok := cache[k]; ok {
		return v
	}
	v := compute(k)
	cache[k] = v
	return v
}

func resultOf(c events.ToolCall) callResult {
	return callResult{output: c.Output, err: c.Error, exitCode: c.ExitCode}
}

func (r callResult) call() events.ToolCall {
	return events.ToolCall{Output: r.output, Error: r.err, ExitCode: r.exitCode}
}

// callSignature is callSignature(c).
func (m *memo) callSignature(c events.ToolCall) string {
	byArgs, ok := m.callSigs[c.Name]
	if !ok {
		byArgs = map[string]string{}
		m.callSigs[c.Name] = byArgs
	}
	// Indexing with string(c.Args) does not copy the args.
	if sig, ok := byArgs[string(c.Args)]; ok {
		return sig
	}
	sig := callSignature(c)
	byArgs[string(c.Args)] = sig
	return sig
}

// failureOf is failureOf(c).
func (m *memo) failureOf(c events.ToolCall) (failure, bool) {
	fm := lookup(m.failures, resultOf(c), func(r callResult) failureMemo {
		f, failed := failureOf(r.call())
		return failureMemo{f, failed}
	})
	return fm.f, fm.failed
}

// outcomeOf is outcomeOf(c).
func (m *memo) outcomeOf(c events.ToolCall) string {
	return lookup(m.outcomes, resultOf(c), func(r callResult) string { return outcomeOf(r.call()) })
}

// textTokens is textTokens(s). The slice is shared: callers must not
// modify it.
func (m *memo) textTokens(s string) []string { return lookup(m.tokens, s, textTokens) }

// textShingles is shingles(textTokens(s)). The set is shared: callers must
// not modify it.
func (m *memo) textShingles(s string) map[string]struct{} {
	return lookup(m.shingles, s, func(s string) map[string]struct{} { return shingles(m.textTokens(s)) })
}

// contentWords is contentWords(s). The set is shared: callers must not
// modify it.
func (m *memo) contentWords(s string) map[string]bool {
	return lookup(m.words, s, func(s string) map[string]bool { return contentWordsOf(m.textTokens(s)) })
}

// prose is prose(s).
func (m *memo) prose(s string) string { return lookup(m.proseTexts, s, prose) }
