package stuckdetector

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/ralphmesh/ralph/pkg/events"
)

// failure is a failed tool call as the detector recognises it again: by a
// fingerprint that survives the noise in which two runs of the same failure
// differ, and by the line a human would recognise it by.
type failure struct {
	// fingerprint is the whole normalized error text and the exit code:
	// the identity of a failure of one call.
	fingerprint string
	// line is the normalized failure line without the tool's own prefix
	// ("vet: "): the identity of an error that different commands report,
	// each with its own banner around it.
	line string
	// quote is the failure line as written, for diagnoses.
	quote string
}

// failureOf reports whether c failed (a tool error or a non-zero exit code)
// and, if so, how. The error text is the tool's error when it gave one and
// the command's output otherwise: a failing `go build` says why on stdout.
func failureOf(c events.ToolCall) (failure, bool) {
	if c.Error == "" && c.ExitCode == 0 {
		return failure{}, false
	}
	text := c.Error
	if text == "" {
		text = c.Output
	}
	quote := failureLine(text)
	return failure{
		fingerprint: "exit " + strconv.Itoa(c.ExitCode) + ": " + normalizeFailure(text),
		line:        normalizeFailure(toolPrefixRE.ReplaceAllString(quote, "")),
		quote:       quote,
	}, true
}

// outcomeOf identifies what a call returned for comparisons that must see
// through noise in failures but not in successes: a poll whose output goes
// from "1 of 3" to "2 of 3" has changed, a test run whose only difference is
// its duration has not.
func outcomeOf(c events.ToolCall) string {
	if f, failed := failureOf(c); failed {
		return "failed\x00" + f.fingerprint
	}
	return "ok\x00" + c.Output
}

// The noise normalizeFailure removes, most specific first: a timestamp or a
// UUID is also a run of digits and hex.
var (
	timestampRE = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T _]\d{2}[:_]\d{2}[:_]\d{2}(?:[.,_]\d+)?(?:Z|[+-]\d{2}:?\d{2})?`)
	clockRE     = regexp.MustCompile(`\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b`)
	uuidRE      = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hexRE       = regexp.MustCompile(`(?i)\b(?:0x[0-9a-f]+|[0-9a-f]{7,})\b`)
	// An absolute path starts a word (or follows a quote, bracket or =);
	// "./main.go" and "pkg/a.go" are relative and kept, because they name
	// what is broken, while absolute paths differ by machine and temp dir.
	// A colon ends the path so that the line:column after it stays apart,
	// and "https://host/x" is not a path because ':' does not start one.
	absPathRE = regexp.MustCompile(`(^|[\s'"(\[=,])(?:~|[A-Za-z]:)?[/\\][^\s'"()\[\]{},;:]+`)
	digitsRE  = regexp.MustCompile(`\d+`)
	// progressRE is how tools report progress ("2 of 3 updated", "14/20",
	// "45%"): numbers that are the news, not noise, so they are kept.
	progressRE = regexp.MustCompile(`\b\d+(?:\.\d+)?(?: of |/)\d+\b|\b\d+(?:\.\d+)?%`)
	// toolPrefixRE is the "vet: " or "error: " a tool puts before the
	// compiler's message it passes on.
	toolPrefixRE = regexp.MustCompile(`^[a-z]+: `)
)

// normalizeFailure removes from an error text what differs between two runs
// of the same failure: timestamps, durations and other numbers, UUIDs and
// hex ids, absolute paths, and whitespace. Progress counters stay: a
// rollout that times out at "1 of 3" and then at "2 of 3" is getting
// somewhere, not failing the same way.
func normalizeFailure(s string) string {
	s = timestampRE.ReplaceAllString(s, "<time>")
	s = clockRE.ReplaceAllString(s, "<time>")
	s = uuidRE.ReplaceAllString(s, "<id>")
	s = hexRE.ReplaceAllStringFunc(s, func(h string) string {
		// All digits is a number, handled below; all letters is a word
		// ("deadbeef", "effaced").
		if strings.HasPrefix(strings.ToLower(h), "0x") ||
			strings.ContainsAny(h, "0123456789") && strings.ContainsAny(strings.ToLower(h), "abcdef") {
			return "<hex>"
		}
		return h
	})
	s = absPathRE.ReplaceAllString(s, "$1<path>")
	var b strings.Builder
	last := 0
	for _, span := range progressRE.FindAllStringIndex(s, -1) {
		b.WriteString(digitsRE.ReplaceAllString(s[last:span[0]], "0"))
		b.WriteString(s[span[0]:span[1]])
		last = span[1]
	}
	b.WriteString(digitsRE.ReplaceAllString(s[last:], "0"))
	return strings.Join(strings.Fields(b.String()), " ")
}

// errorPhrases mark a line that says what went wrong, as whole words;
// besides them a word ending in "error" or "exception" does ("KeyError",
// "AssertionFailedError"), and npm's "ERR!". A word starting with "fail"
// only says that something went wrong ("> Task :test FAILED", "--- FAIL:
// TestX") and counts when no line says more. Words, not substrings:
// "refundCannotExceedCapture" is a test name, not an error. A traceback's
// header is neither: the error is its last line.
var errorPhrases = []string{
	"panic", "undefined", "cannot", "can t", "not found", "no such", "denied", "refused",
	"fatal", "timed out", "errors",
}

// failureLine picks the line to quote and to recognise an error by: the
// first that names an error in more than one word, else the first that
// names a failure (not a bare "FAIL" or a "=== FAILURES ===" banner), else
// the first non-blank line.
func failureLine(s string) string {
	first, failLine := "", ""
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if first == "" {
			first = line
		}
		words := strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r)
		})
		if len(words) < 2 {
			continue
		}
		if namesError(line, words) {
			return line
		}
		if failLine == "" && slices.ContainsFunc(words, func(w string) bool { return strings.HasPrefix(w, "fail") }) {
			failLine = line
		}
	}
	if failLine != "" {
		return failLine
	}
	return first
}

func namesError(line string, words []string) bool {
	if strings.Contains(strings.ToLower(line), "err!") {
		return true
	}
	for _, w := range words {
		if strings.HasSuffix(w, "error") || strings.HasSuffix(w, "exception") {
			return true
		}
	}
	joined := " " + strings.Join(words, " ") + " "
	for _, p := range errorPhrases {
		if strings.Contains(joined, " "+p+" ") {
			return true
		}
	}
	return false
}
