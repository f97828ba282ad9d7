package stuckdetector

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// failure is a failed tool call as the detector recognises it again: by a
// fingerprint that survives the noise in which two runs of the same failure
// differ, and by the line a human would recognise it by.
type failure struct {
	// fingerprint is the whole normalized error text and the exit code:
	// the identity of a failure of one call.
	fingerprint string
	// line is the normalized failure line (tools.ErrorLine, the mesh's one
	// rule for it) without the tool's own prefix ("vet: "): the identity of
	// an error that different commands report, each with its own banner
	// around it.
	line string
	// quote is the failure line as written, for diagnoses.
	quote string
	// progress is the failure's progress counters ("1 of 3", "45%"): a
	// call that fails again with its counters moved is getting somewhere.
	progress string
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
	quote := tools.ErrorLine(text)
	stripped := stripNoise(text)
	return failure{
		fingerprint: "exit " + strconv.Itoa(c.ExitCode) + ": " + normalizeStripped(stripped),
		line:        normalizeFailure(toolPrefixRE.ReplaceAllString(quote, "")),
		quote:       quote,
		progress:    strings.Join(progressRE.FindAllString(stripped, -1), "\x00"),
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
	// A date is written with dashes or, in Go's log format, with slashes
	// ("2026/01/18 10:41:07"), which would otherwise read as a progress
	// counter.
	timestampRE = regexp.MustCompile(`\d{4}[-/]\d{2}[-/]\d{2}(?:[T _]\d{2}[:_]\d{2}[:_]\d{2}(?:[.,_]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?`)
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
	// durationRE is a duration as tools print it ("0.011s", "in 7s",
	// "250ms"): how long a run took, which differs on every run.
	durationRE = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h)\b`)
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
func normalizeFailure(s string) string { return normalizeStripped(stripNoise(s)) }

// normalizeStripped is normalizeFailure of a text stripNoise has stripped.
func normalizeStripped(s string) string {
	if !hasDigit(s) {
		// Nothing for progressRE or digitsRE to find.
		return strings.Join(strings.Fields(s), " ")
	}
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

// stripNoise replaces the timestamps, UUIDs, hex ids and absolute paths of
// s with placeholders, leaving its numbers.
//
// Each expression runs only on text that has what every match of it starts
// with: the regexps cost more than the rest of an analysis, and most outputs
// hold no date, clock, UUID, hex id or absolute path.
func stripNoise(s string) string {
	if runBefore(s, 4, isDigit, "-/") { // 2026-01-18, 2026/01/18
		s = timestampRE.ReplaceAllString(s, "<time>")
	}
	if runBefore(s, 1, isDigit, ":") { // 10:41:07
		s = clockRE.ReplaceAllString(s, "<time>")
	}
	if runBefore(s, 8, isHexDigit, "-") { // 123e4567-
		s = uuidRE.ReplaceAllString(s, "<id>")
	}
	if hasDigit(s) && mayHoldHex(s) {
		// Without a digit, hexRE finds only words, which it keeps.
		s = hexRE.ReplaceAllStringFunc(s, func(h string) string {
			// All digits is a number, left to the caller; all letters is a
			// word ("deadbeef", "effaced").
			if strings.HasPrefix(strings.ToLower(h), "0x") ||
				strings.ContainsAny(h, "0123456789") && strings.ContainsAny(strings.ToLower(h), "abcdef") {
				return "<hex>"
			}
			return h
		})
	}
	if strings.ContainsAny(s, `/\`) {
		s = absPathRE.ReplaceAllString(s, "$1<path>")
	}
	return s
}

// mayHoldHex reports whether s has what every match of hexRE starts with:
// "0x" or seven hex digits in a row.
func mayHoldHex(s string) bool {
	if strings.Contains(s, "0x") || strings.Contains(s, "0X") {
		return true
	}
	run := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isHexDigit(c) {
			if run++; run >= 7 {
				return true
			}
			continue
		}
		run = 0
	}
	return false
}

// runBefore reports whether s has n or more bytes in a row for which in
// is true, followed by one of the bytes of seps.
func runBefore(s string, n int, in func(byte) bool, seps string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if run >= n && strings.IndexByte(seps, c) >= 0 {
			return true
		}
		if in(c) {
			run++
		} else {
			run = 0
		}
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHexDigit(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// hasDigit reports whether s has an ASCII digit, which \d is in Go's
// regexps: without one, no number, time, duration or counter can match.
func hasDigit(s string) bool {
	return strings.ContainsAny(s, "0123456789")
}
