package compactbench

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

func TestPrefixReuse(t *testing.T) {
	c, err := counter()
	if err != nil {
		t.Fatal(err)
	}
	msg := func(id, role, content string) units.Unit {
		return units.Unit{ID: id, Role: role, Kind: units.KindMessage, Content: content, Tokens: c.Count(content)}
	}
	sys := msg("system", "system", "You are the Builder.")
	task := msg("task", "user", "Task T1: write the notes.\nAcceptance criteria:\n- notes.md exists\n")
	step1 := units.Unit{ID: "assistant-1", Role: "assistant", Kind: units.KindMessage, Content: "Reading.", Tokens: 10,
		Calls: []units.Call{{ID: "c1", Name: "read_file", Args: `{"path":"a.md"}`}}}
	result1 := units.Unit{ID: "tool-1-0", Role: "tool", Kind: units.KindToolResult, Tool: "read_file", CallID: "c1", Content: "alpha\nbeta\n", Tokens: 4}
	cp := msg("checkpoint-T1", "user", "[checkpoint]\n## Key Decisions\n- read a.md\n")
	grown := msg("checkpoint-T1", "user", "[checkpoint]\n## Key Decisions\n- read a.md\n- wrote b.md\n")
	ptr := result1
	ptr.Content, ptr.Tokens = "[pointer to a.md]\nalpha\n", 6
	other := step1
	other.Calls = []units.Call{{ID: "c1", Name: "read_file", Args: `{"path":"b.md"}`}}

	tests := []struct {
		name      string
		prev, cur []units.Unit
		want      int
		extends   bool
	}{
		{"the next step extends the prompt", []units.Unit{sys, task}, []units.Unit{sys, task, step1, result1}, sys.Tokens + task.Tokens, true},
		{"the same prompt", []units.Unit{sys, task, step1}, []units.Unit{sys, task, step1}, sys.Tokens + task.Tokens + step1.Tokens, true},
		{"a rewritten unit ends the prefix, whatever follows; its lines before the change count", []units.Unit{sys, task, step1, result1},
			[]units.Unit{sys, task, other, result1}, sys.Tokens + task.Tokens + c.Count("Reading.\nc1\nread_file\n"), false},
		{"the shared whole lines of the first differing unit count", []units.Unit{sys, task, cp, step1}, []units.Unit{sys, task, grown, step1},
			sys.Tokens + task.Tokens + c.Count("[checkpoint]\n## Key Decisions\n- read a.md\n"), false},
		{"a unit rewritten from its first line shares nothing", []units.Unit{sys, task, step1, result1}, []units.Unit{sys, task, step1, ptr},
			sys.Tokens + task.Tokens + step1.Tokens, false},
		{"a checkpoint inserted after the head", []units.Unit{sys, task, step1, result1}, []units.Unit{sys, task, cp, result1}, sys.Tokens + task.Tokens, false},
		{"a shorter prompt", []units.Unit{sys, task, step1}, []units.Unit{sys, task}, sys.Tokens + task.Tokens, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ext := prefixReuse(tt.prev, tt.cur, c.Count)
			if got != tt.want || ext != tt.extends {
				t.Errorf("prefixReuse = %d, %v; want %d, %v", got, ext, tt.want, tt.extends)
			}
		})
	}

	// Over a run: the first call reuses nothing; the share is reused over
	// prompt tokens.
	var reuse cacheReuse
	for _, p := range [][]units.Unit{{sys, task}, {sys, task, step1, result1}, {sys, task, cp, result1}} {
		reuse.call(p, c.Count)
	}
	if want := 2*(sys.Tokens+task.Tokens) + 0; reuse.Reused != want || reuse.Extending != 1 || reuse.Calls != 3 {
		t.Errorf("run: %+v, want %d reused, 1 extending of 3 calls", reuse, want)
	}
}
