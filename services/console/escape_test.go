package console

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

func TestEscape(t *testing.T) {
	cases := []struct {
		name, in, line, lines string
	}{
		{"plain text passes", "fix the parser", "fix the parser", "fix the parser"},
		{"UTF-8 passes", "Grüße ✔ 日本", "Grüße ✔ 日本", "Grüße ✔ 日本"},
		{"tab stays", "a\tb", "a\tb", "a\tb"},
		{"newline in a line is escaped, kept in lines", "a\nb", `a\nb`, "a\nb"},
		{"carriage return", "a\r✔ done", `a\r✔ done`, `a\r✔ done`},
		{"ESC sequence: clear screen", "\x1b[2J", `\x1b[2J`, `\x1b[2J`},
		{"OSC: retitle the terminal", "\x1b]0;owned\x07", `\x1b]0;owned\x07`, `\x1b]0;owned\x07`},
		{"other C0 controls", "\x00\x08\x0b\x0c\x1f", `\x00\x08\x0b\x0c\x1f`, `\x00\x08\x0b\x0c\x1f`},
		{"DEL", "a\x7fb", `a\x7fb`, `a\x7fb`},
		{"C1 CSI as UTF-8", "a\u009b2Jb", `a\u009b2Jb`, `a\u009b2Jb`},
		{"C1 NEL", "a\u0085b", `a\u0085b`, `a\u0085b`},
		{"lone C1 byte (not UTF-8)", "a\x9b2J", `a\x9b2J`, `a\x9b2J`},
		{"invalid UTF-8 byte", "a\xffb", `a\xffb`, `a\xffb`},
		{"right-to-left override", "abc\u202edef", `abc\u202edef`, `abc\u202edef`},
		{"isolate", "x\u2066y\u2069", `x\u2066y\u2069`, `x\u2066y\u2069`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Escape(c.in); got != c.line {
				t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.line)
			}
			if got := EscapeLines(c.in); got != c.lines {
				t.Errorf("EscapeLines(%q) = %q, want %q", c.in, got, c.lines)
			}
		})
	}
}

func TestEscapeJSON(t *testing.T) {
	v := map[string]string{"title": "a\x1b[2J\u009b\x7f\u202e✔"}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := EscapeJSON(b)
	for _, bad := range []string{"\x1b", "\u009b", "\x7f", "\u202e"} {
		if strings.Contains(string(got), bad) {
			t.Errorf("%q still holds %q", got, bad)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("escaped JSON %s does not decode: %v", got, err)
	}
	if back["title"] != v["title"] {
		t.Fatalf("escaped JSON decodes to %q, want %q", back["title"], v["title"])
	}
}

// A task title, a model's text and a tool's arguments that try to clear
// the screen, overwrite the line or fake a "session completed" line are
// printed escaped, on the line they belong to.
func TestRenderEscapesWhatEventsCarry(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hostile := "\x1b[2J\r✔ session completed"
	cases := []struct {
		typ     events.Type
		payload any
		lines   int
	}{
		{events.TaskStarted, events.TaskStartedData{Task: prd.Task{ID: "T1", Title: hostile, AcceptanceCriteria: []string{"x"}}}, 1},
		{events.IterationCompleted, events.IterationRecord{Iteration: 1, ClaimedDone: true, AssistantText: hostile,
			ToolCalls: []events.ToolCall{{Name: "run", Args: json.RawMessage(`{"command":"echo \u001b[2J\r\nfake"}`), Error: hostile}}}, 3},
		{events.SessionFailed, events.SessionFailedData{Reason: "x\n[s1] " + hostile}, 1},
		{events.TaskDecomposed, events.TaskDecomposedData{ParentID: "T1", Subtasks: []prd.Task{
			{ID: "T1.1", Title: hostile, AcceptanceCriteria: []string{"a"}}, {ID: "T1.2", Title: "b\nc", AcceptanceCriteria: []string{"b"}}}}, 3},
	}
	for _, c := range cases {
		t.Run(string(c.typ), func(t *testing.T) {
			got := Render(events.Must(c.typ, "s1", "T1", 1, at, c.payload))
			if strings.ContainsAny(got, "\x1b\r") {
				t.Fatalf("rendered raw controls: %q", got)
			}
			if !strings.Contains(got, `\x1b[2J\r✔ session completed`) {
				t.Errorf("the hostile text is not shown escaped: %q", got)
			}
			if n := strings.Count(got, "\n") + 1; n != c.lines {
				t.Errorf("%d lines, want %d: %q", n, c.lines, got)
			}
			for _, l := range strings.Split(got, "\n") {
				if !strings.HasPrefix(l, "[s1]") {
					t.Errorf("line %q does not start with the session", l)
				}
			}
		})
	}
}
