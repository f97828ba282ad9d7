package memory

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Learnings are what a finished task taught, taken from its context without
// a model: the summarizer's fallback when its model is unavailable or too
// slow. Each is tagged with the task and read from what the tools
// reported, never guessed:
//
//   - Errors & Solutions: each command that failed (with its error line)
//     and the command that then worked, with the files changed in between;
//   - Critical Context: the last command that ran clean, the check the
//     builder made before it said it was done;
//   - Key Decisions: the builder's closing message, in whole lines;
//   - Modified Files: every file the task changed.
//
// The notes are bounded by maxTokens (Bound). count measures tokens (nil:
// about four bytes a token).
func Learnings(t Task, stored []units.Unit, maxTokens int, count func(string) int) Notes {
	count = counter(count)
	us := expand(stored)
	ss := steps(us)
	var ns Notes
	add := func(s Section, text string) {
		if text = strings.TrimSpace(text); text != "" {
			ns = append(ns, Note{Section: s, Task: t.ID, Text: text})
		}
	}
	for _, fix := range fixes(ss) {
		add(ErrorsAndSolutions, fix)
	}
	for i := len(ss) - 1; i >= 0; i-- {
		if s := ss[i]; s.tool == tools.Run && !s.failed && s.subject != "" {
			add(CriticalContext, fmt.Sprintf("`%s` ran clean at the end of the task", s.subject))
			break
		}
	}
	if c := closing(t, us); c != "" {
		// The closing message is the builder's own account; a quarter of
		// the task's share keeps its gist in whole lines.
		add(KeyDecisions, compaction.Extract(c, max(maxTokens/4, 16), count))
	}
	for _, f := range writtenPaths(t.FilesChanged, ss) {
		add(ModifiedFiles, f)
	}
	out, _ := Bound(ns, maxTokens, count)
	return out
}

// fixes pairs each run that failed with the run of the same command that
// worked after it (the same program, whatever environment was set before
// it): "`a` failed (error line); `FOO=1 a` worked after changing x.go".
// Failures that nothing fixed within the task are left out: it was
// approved, so they did not matter to it. The same fix is said once.
func fixes(ss []step) []string {
	type open struct {
		failure
		edited []string
	}
	var pending []open
	var out []string
	for _, s := range ss {
		switch {
		case s.tool == tools.Run && s.failed && s.subject != "":
			f := failure{s.subject, s.errLine}
			if !slices.ContainsFunc(pending, func(o open) bool { return o.failure == f }) {
				pending = append(pending, open{failure: f})
			}
		case s.tool == tools.Run && !s.failed && s.subject != "":
			var fails, edited []string
			rest := pending[:0]
			for _, o := range pending {
				if !sameCommand(o.cmd, s.subject) {
					rest = append(rest, o)
					continue
				}
				what := fmt.Sprintf("`%s` failed", o.cmd)
				if o.err != "" {
					what += " (" + o.err + ")"
				}
				fails = append(fails, what)
				for _, e := range o.edited {
					if !slices.Contains(edited, e) {
						edited = append(edited, e)
					}
				}
			}
			pending = rest
			if len(fails) == 0 {
				continue
			}
			fix := strings.Join(fails, "; ") + fmt.Sprintf("; `%s` worked", s.subject)
			if len(edited) > 0 {
				fix += " after changing " + strings.Join(edited, ", ")
			}
			if !slices.Contains(out, fix) {
				out = append(out, fix)
			}
		case (s.tool == tools.WriteFile || s.tool == tools.EditFile) && !s.failed:
			for i := range pending {
				if !slices.Contains(pending[i].edited, s.subject) {
					pending[i].edited = append(pending[i].edited, s.subject)
				}
			}
		}
	}
	return out
}

// failure is a command that failed and its error line.
type failure struct{ cmd, err string }

// sameCommand reports whether two command lines run the same thing: their
// first two words agree (as far as the shorter goes) once leading variable
// assignments and env are set aside, so "sh gen.sh 1" and "FOO=1 sh gen.sh
// 1" are the same command and "cat log" is not.
func sameCommand(a, b string) bool {
	wa, wb := program(a), program(b)
	n := min(len(wa), len(wb), 2)
	return n > 0 && slices.Equal(wa[:n], wb[:n])
}

// program is a command line's words from the program on.
func program(cmd string) []string {
	ws := strings.Fields(cmd)
	for len(ws) > 0 && (ws[0] == "env" || strings.Contains(ws[0], "=") && !strings.HasPrefix(ws[0], "=")) {
		ws = ws[1:]
	}
	return ws
}
