package builder

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// This file writes progress.txt, the Ralph convention's notes of a
// session: one entry per approved task (what was done, the files, the
// learnings) and, at the top, a "Codebase patterns" section that every
// later task reads first. It is pure text: the shell reads and writes the
// file (notes.go).

// ProgressFile is where the notes are, relative to the workspace.
const ProgressFile = "progress.txt"

// maxPatterns bounds the patterns a task starts with; the rest stay in
// the file.
const maxPatterns = 4096

// ProgressEntry is one approved task's notes.
type ProgressEntry struct {
	Session string   `json:"session"`
	TaskID  string   `json:"task_id"`
	Title   string   `json:"title"`
	Summary string   `json:"summary,omitempty"`
	Files   []string `json:"files,omitempty"`
	Verdict string   `json:"verdict,omitempty"`
	// Verify is the verify command that passed: a command that works.
	Verify string `json:"verify,omitempty"`
}

var (
	patternsHeading  = regexp.MustCompile(`(?i)^##\s*codebase\s+patterns\s*$`)
	learningsHeading = regexp.MustCompile(`(?i)^\s*(#+\s*)?(\*\*)?learnings(\*\*)?:?(\*\*)?\s*$`)
	patternLine      = regexp.MustCompile(`(?i)^[-*]\s*pattern:\s*(.+)$`)
)

// heading is the entry's first line; an entry is found again by it, so
// writing the same task's notes twice (a redelivery, a second approval
// after a refused commit) replaces them.
func (e ProgressEntry) heading() string {
	return fmt.Sprintf("## %s: %s (session %s)", e.TaskID, oneLine(e.Title), e.Session)
}

// split is the builder's summary without its learnings, and the learnings
// (its "- " lines under a "Learnings:" line).
func (e ProgressEntry) split() (done string, learnings []string) {
	var before []string
	in := false
	for _, l := range strings.Split(strings.TrimSpace(e.Summary), "\n") {
		switch {
		case learningsHeading.MatchString(l):
			in = true
		case in && strings.TrimSpace(l) == "":
		case in:
			learnings = append(learnings, bullet(l))
		default:
			before = append(before, l)
		}
	}
	return strings.TrimSpace(strings.Join(before, "\n")), learnings
}

func bullet(l string) string {
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* ") {
		return "- " + strings.TrimSpace(l[2:])
	}
	return "- " + l
}

// text is the entry as it stands in the file.
func (e ProgressEntry) text() string {
	done, learnings := e.split()
	var b strings.Builder
	b.WriteString(e.heading() + "\n")
	if done != "" {
		fmt.Fprintf(&b, "Done: %s\n", done)
	}
	if len(e.Files) > 0 {
		fmt.Fprintf(&b, "Files: %s\n", strings.Join(e.Files, ", "))
	}
	if e.Verdict != "" {
		fmt.Fprintf(&b, "Reviewer: %s\n", oneLine(e.Verdict))
	}
	if e.Verify != "" {
		learnings = append(learnings, fmt.Sprintf("- `%s` passes (the reviewer's check)", oneLine(e.Verify)))
	}
	if len(learnings) > 0 {
		b.WriteString("Learnings:\n" + strings.Join(learnings, "\n") + "\n")
	}
	return b.String()
}

// patterns are the entry's "- Pattern: ..." learnings.
func (e ProgressEntry) patterns() []string {
	_, learnings := e.split()
	var ps []string
	for _, l := range learnings {
		if m := patternLine.FindStringSubmatch(l); m != nil {
			ps = append(ps, strings.TrimSpace(m[1]))
		}
	}
	return ps
}

// AddProgress is progress.txt (old, "" when there is none) with e's entry
// at the end, replacing an earlier entry of the same task and session, and
// e's patterns added to the "Codebase patterns" section at the top (made
// there when the file has none), each once.
func AddProgress(old string, e ProgressEntry) string {
	lines := strings.Split(strings.TrimRight(old, "\n"), "\n")
	if strings.TrimSpace(old) == "" {
		lines = []string{"# Progress", ""}
	}
	lines = removeEntry(lines, e.heading())
	start, end := patternsSection(lines)
	if start < 0 {
		// At the top, after the file's title if it has one.
		var head, rest []string
		if len(lines) > 0 && strings.HasPrefix(lines[0], "# ") {
			head, rest = []string{lines[0], ""}, lines[1:]
		} else {
			rest = lines
		}
		for len(rest) > 0 && strings.TrimSpace(rest[0]) == "" {
			rest = rest[1:]
		}
		section := []string{"## Codebase patterns", ""}
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "## ") {
			// Text of the file's own before its first entry stays out
			// of the section.
			section = append(section, "## Notes")
		}
		lines = slices.Concat(head, section, rest)
		start, end = patternsSection(lines)
	}
	have := map[string]bool{}
	for _, l := range lines[start+1 : end] {
		if m := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- ")); m != "" {
			have[strings.ToLower(m)] = true
		}
	}
	var add []string
	for _, p := range e.patterns() {
		if !have[strings.ToLower(p)] {
			have[strings.ToLower(p)] = true
			add = append(add, "- "+p)
		}
	}
	// New patterns go after the section's last bullet, before the blank
	// line that ends it.
	at := end
	for at > start+1 && strings.TrimSpace(lines[at-1]) == "" {
		at--
	}
	lines = append(lines[:at], append(add, lines[at:]...)...)
	text := strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n\n" + e.text()
	return text
}

// patternsSection is where the "Codebase patterns" section is in lines:
// its heading and the line after its last (the next "## " heading or the
// end); -1 when there is none.
func patternsSection(lines []string) (start, end int) {
	start = -1
	for i, l := range lines {
		if patternsHeading.MatchString(strings.TrimSpace(l)) {
			start = i
			break
		}
	}
	if start < 0 {
		return -1, -1
	}
	end = len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			end = i
			break
		}
	}
	return start, end
}

// removeEntry drops the entry whose first line is heading, up to the next
// "## " heading.
func removeEntry(lines []string, heading string) []string {
	for i, l := range lines {
		if l != heading {
			continue
		}
		j := i + 1
		for j < len(lines) && !strings.HasPrefix(lines[j], "## ") {
			j++
		}
		for i > 0 && strings.TrimSpace(lines[i-1]) == "" {
			i--
		}
		return append(lines[:i:i], lines[j:]...)
	}
	return lines
}

// Patterns is the "Codebase patterns" section of a progress.txt: its
// bullet lines, whole, at most maxPatterns bytes of them (the file keeps
// the rest, and says how many).
func Patterns(progress string) string {
	lines := strings.Split(progress, "\n")
	start, end := patternsSection(lines)
	if start < 0 {
		return ""
	}
	var b strings.Builder
	left := 0
	for _, l := range lines[start+1 : end] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "- ") && !strings.HasPrefix(l, "* ") {
			continue
		}
		if b.Len()+len(l)+1 > maxPatterns {
			left++
			continue
		}
		b.WriteString(l + "\n")
	}
	if left > 0 {
		fmt.Fprintf(&b, "(%d more in %s)\n", left, ProgressFile)
	}
	return strings.TrimRight(b.String(), "\n")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
