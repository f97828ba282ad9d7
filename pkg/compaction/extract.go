package compaction

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/ralphmesh/ralph/pkg/tools"
)

// Line classes Extract keeps, in the order it gives them up last: errors
// explain what went wrong (the lines tools.ErrorLine would pick: the mesh's
// one rule for them), paths say where, the first line says what the text
// is, decisions say what was chosen.
const (
	lineError = iota
	linePath
	lineFirst
	lineDecision
	lineOther
)

var (
	decisionWords = []string{"decid", "decision", "todo", "fixme", "must", "chose", "should"}
	pathLike      = regexp.MustCompile(`[\w.-]+/[\w.-]+|\b[\w-]+\.(?:go|mod|sum|md|txt|py|js|ts|tsx|jsx|json|ya?ml|toml|rs|java|kt|c|h|cc|cpp|hpp|cs|rb|php|sh|sql|html|css|proto|xml|ini|cfg|lock)\b`)
)

func lineClass(line string, first bool) int {
	switch {
	case tools.NamesError(line):
		return lineError
	case pathLike.MatchString(line):
		return linePath
	case first:
		return lineFirst
	case containsAny(strings.ToLower(line), decisionWords):
		return lineDecision
	default:
		return lineOther
	}
}

// Extract is the deterministic compaction used when the compactor LLM is
// unavailable. Text within maxTokens is returned as is. Otherwise it keeps
// whole lines that carry errors, file paths or decisions, plus the first
// line, in their original order, and ends with a line saying how many lines
// were left out. When those lines do not all fit it prefers error lines,
// then paths, then the first line, then decisions, strictly: no line of a
// class is kept while one of a preferred class had to be left out. A line
// is kept whole or not at all, so nothing is ever cut. count measures tokens (nil: about
// four bytes a token). The result is "" when not even the note fits.
func Extract(text string, maxTokens int, count func(string) int) string {
	if count == nil {
		count = func(s string) int { return (len(s) + 3) / 4 }
	}
	if count(text) <= maxTokens {
		return text
	}
	lines := strings.Split(text, "\n")
	firstSeen := false
	var picks []int
	class := make([]int, len(lines))
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			class[i] = lineOther
			continue
		}
		class[i] = lineClass(l, !firstSeen)
		firstSeen = true
		if class[i] != lineOther {
			picks = append(picks, i)
		}
	}
	sort.SliceStable(picks, func(a, b int) bool { return class[picks[a]] < class[picks[b]] })

	note := func(kept int) string {
		return fmt.Sprintf("[extract: %d of %d lines left out]", len(lines)-kept, len(lines))
	}
	keep := make([]bool, len(lines))
	budget := maxTokens - count(note(0)) - 1
	blocked := lineOther // the first class a line of which had to be left out
	for _, i := range picks {
		if class[i] > blocked {
			break
		}
		cost := count(lines[i]) + 1
		switch {
		case cost <= budget:
			keep[i] = true
			budget -= cost
		case cost <= maxTokens:
			// Preference is strict: no path is kept while an error that
			// could have been is left out. A line larger than the whole
			// budget could never be kept and blocks nothing.
			blocked = class[i]
		}
	}
	render := func() string {
		var kept []string
		for i, l := range lines {
			if keep[i] {
				kept = append(kept, l)
			}
		}
		return strings.Join(append(kept, note(len(kept))), "\n")
	}
	// Per-line costs only estimate the joined text's; give up the least
	// preferred lines until the whole fits.
	out := render()
	for k := len(picks) - 1; count(out) > maxTokens && k >= 0; k-- {
		if keep[picks[k]] {
			keep[picks[k]] = false
			out = render()
		}
	}
	if count(out) > maxTokens {
		return ""
	}
	return out
}
