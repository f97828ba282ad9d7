package memory

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Task is what the session's state says of a finished task.
type Task struct {
	ID    string
	Title string
	// FilesChanged are the files the task changed, as the builder counted
	// them: every memory of the task names them.
	FilesChanged []string
	// Summary is the builder's closing message, which the reviewer
	// approved.
	Summary string
}

// step is one tool call of the task with how it ended, read from its
// result unit (which carries the call's tool and arguments).
type step struct {
	unit     int // index in the expanded units
	tool     string
	subject  string // the command, path or pattern the call was about
	failed   bool
	errLine  string
	artifact string
}

// steps reads the tool results of us (compaction.ExpandCalls of the
// stored units) in order.
func steps(us []units.Unit) []step {
	var out []step
	for i, u := range us {
		if u.Kind != units.KindToolResult {
			continue
		}
		s := step{unit: i, tool: u.Tool, subject: subjectOf(u.Args), failed: tools.TextFailed(u.Content), artifact: u.Artifact}
		if s.failed {
			s.errLine = tools.TextErrorLine(u.Content)
		}
		out = append(out, s)
	}
	return out
}

// subjectOf is what a call was about: its command, path, pattern or
// artifact id.
func subjectOf(args json.RawMessage) string {
	var a map[string]any
	if json.Unmarshal(args, &a) != nil {
		return ""
	}
	for _, k := range []string{"command", "path", "pattern", "id"} {
		if v, ok := a[k].(string); ok && v != "" {
			return oneLine(v)
		}
	}
	return ""
}

// oneLine keeps a multi-line command readable on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// writtenPaths are the paths the task wrote or edited, in order, each once,
// after the ones given.
func writtenPaths(known []string, ss []step) []string {
	out := append([]string(nil), known...)
	for _, s := range ss {
		if (s.tool == tools.WriteFile || s.tool == tools.EditFile) && !s.failed && s.subject != "" && !slices.Contains(out, s.subject) {
			out = append(out, s.subject)
		}
	}
	return out
}

// closing is the builder's closing message: the task's summary, else the
// last assistant message without tool calls.
func closing(t Task, us []units.Unit) string {
	if s := strings.TrimSpace(t.Summary); s != "" {
		return s
	}
	for i := len(us) - 1; i >= 0; i-- {
		if u := us[i]; u.Kind == units.KindMessage && u.Role == "assistant" && len(u.Calls) == 0 && strings.TrimSpace(u.Content) != "" {
			return strings.TrimSpace(u.Content)
		}
	}
	return ""
}

// expand is the planner's view of stored units: one unit per tool call.
func expand(us []units.Unit) []units.Unit { return compaction.ExpandCalls(us) }
