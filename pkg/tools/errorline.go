package tools

import (
	"slices"
	"strings"
	"unicode"
)

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

// ErrorLine is the line of text that names what went wrong: the first line
// that names an error in more than one word, else the first that names a
// failure (not a bare "FAIL" or a "=== FAILURES ===" banner), else the first
// non-blank line; trimmed, and "" when text is blank. The lines a pointer
// adds (IsPointerLine) are passed over: a digest of a long output is judged
// by the lines of the output it shows, as the output itself would be, not
// by the line saying where the rest is. It is the mesh's one
// rule for the line an error is quoted and recognised by: the stuck
// detector fingerprints failures by it, the summarizer keeps it as an
// unresolved error, and Extract keeps the lines it would pick.
func ErrorLine(text string) string {
	first, failLine := "", ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || IsPointerLine(line) {
			continue
		}
		if first == "" {
			first = line
		}
		switch lineWeight(line) {
		case namesError:
			return line
		case namesFailure:
			if failLine == "" {
				failLine = line
			}
		}
	}
	if failLine != "" {
		return failLine
	}
	return first
}

// NamesError reports whether line names an error or a failure in the words
// ErrorLine goes by: a line ErrorLine would pick over an ordinary one.
func NamesError(line string) bool {
	return lineWeight(strings.TrimSpace(line)) != namesNothing
}

// TextErrorLine is the line that says what went wrong in text, a tool
// result as Result.Text renders it: "" when the result did not fail (see
// TextFailed), else the ErrorLine of the text below the "exit code N"
// header of a run, whose own line says only that it failed.
func TextErrorLine(text string) string {
	if !TextFailed(text) {
		return ""
	}
	text = belowPointer(text)
	if strings.HasPrefix(text, "exit code ") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return ErrorLine(text)
}

// How much a line says about what went wrong.
const (
	namesNothing = iota
	namesFailure
	namesError
)

func lineWeight(line string) int {
	words := strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	// One word ("FAIL", "error") says that something went wrong, not what.
	if len(words) < 2 {
		return namesNothing
	}
	if strings.Contains(strings.ToLower(line), "err!") {
		return namesError
	}
	for _, w := range words {
		if strings.HasSuffix(w, "error") || strings.HasSuffix(w, "exception") {
			return namesError
		}
	}
	joined := " " + strings.Join(words, " ") + " "
	for _, p := range errorPhrases {
		if strings.Contains(joined, " "+p+" ") {
			return namesError
		}
	}
	if slices.ContainsFunc(words, func(w string) bool { return strings.HasPrefix(w, "fail") }) {
		return namesFailure
	}
	return namesNothing
}
