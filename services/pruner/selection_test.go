package pruner

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/units"
)

// stuckContext is a builder context of a task that is writing report.md,
// hit a failing test and then looped on reading notes.txt.
func stuckContext() []units.Unit {
	call := func(step int, id, name, args string) units.Unit {
		return units.Unit{ID: "assistant-" + id, Role: "assistant", Kind: units.KindMessage, Turn: step,
			Content: "step " + id, Calls: []units.Call{{ID: "c" + id, Name: name, Args: args}}, Tokens: 20}
	}
	result := func(step int, id, name, args, content string) units.Unit {
		return units.Unit{ID: "tool-" + id, Role: "tool", Kind: units.KindToolResult, Tool: name, CallID: "c" + id,
			Args: json.RawMessage(args), Content: content, Turn: step, Tokens: 40}
	}
	return []units.Unit{
		{ID: "system-T1", Role: "system", Kind: units.KindMessage, Content: "You are the Builder.", Tokens: 10},
		{ID: "task-T1", Role: "user", Kind: units.KindMessage, Content: "Task T1: Write report.md\n\nAcceptance criteria:\n- report.md lists every note\n", Tokens: 30},
		call(1, "1", "list_dir", `{"path":"."}`),
		result(1, "1", "list_dir", `{"path":"."}`, "notes.txt\nreport.md\n"),
		call(2, "2", "write_file", `{"path":"report.md","content":"# Report\n"}`),
		result(2, "2", "write_file", `{"path":"report.md","content":"# Report\n"}`, "wrote 9 bytes to report.md"),
		call(3, "3", "run", `{"command":"go test ./..."}`),
		result(3, "3", "run", `{"command":"go test ./..."}`, "exit code 1\n--- FAIL: TestReport (0.00s)\n    report_test.go:12: missing note \"milk\""),
		call(4, "4", "run", `{"command":"go test ./..."}`),
		result(4, "4", "run", `{"command":"go test ./..."}`, "exit code 1\n--- FAIL: TestReport (0.00s)\n    report_test.go:12: missing note \"milk\""),
		{ID: "critique-5", Role: "user", Kind: units.KindMessage, Content: "The reviewer did not accept task T1: the notes are missing.", Turn: 5, Tokens: 20},
		call(6, "6", "read_file", `{"path":"notes.txt"}`),
		result(6, "6", "read_file", `{"path":"notes.txt"}`, "remember the milk\n"),
		call(7, "7", "read_file", `{"path":"notes.txt"}`),
		result(7, "7", "read_file", `{"path":"notes.txt"}`, "remember the milk\n"),
		call(8, "8", "read_file", `{"path":"notes.txt"}`),
		result(8, "8", "read_file", `{"path":"notes.txt"}`, "remember the milk\n"),
	}
}

func ids(us []units.Unit) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.ID
	}
	return out
}

func TestSelectKeepsProtectedUnitsVerbatim(t *testing.T) {
	us := stuckContext()
	sel := Select(compaction.Document{LimitTokens: 8000, CurrentTurn: 9, Task: compaction.Task{Goal: "Write report.md"}, Units: us})

	kept := ids(sel.Kept)
	for _, want := range []string{"system-T1", "task-T1", "critique-5", "assistant-2", "tool-2", "assistant-4", "tool-4"} {
		if !slices.Contains(kept, want) {
			t.Errorf("%s was removed; kept %v (why: %v)", want, kept, sel.Why)
		}
	}
	// The repeated failure is kept once (the latest); the loop's reads and
	// the finished exploration go.
	for _, gone := range []string{"assistant-3", "tool-3", "assistant-1", "tool-1"} {
		if slices.Contains(kept, gone) {
			t.Errorf("%s was kept; want it removed (why: %q)", gone, sel.Why[gone])
		}
	}
	if len(sel.Kept)+len(sel.Removed) != len(us) {
		t.Fatalf("%d kept + %d removed != %d units", len(sel.Kept), len(sel.Removed), len(us))
	}
	// Byte for byte: every kept unit is the stored unit, unchanged.
	byID := map[string]units.Unit{}
	for _, u := range us {
		byID[u.ID] = u
	}
	for _, k := range sel.Kept {
		if !reflect.DeepEqual(k, byID[k.ID]) {
			t.Errorf("kept unit %s changed:\n got %+v\nwant %+v", k.ID, k, byID[k.ID])
		}
	}
	// Order is kept, and no tool result is separated from its call.
	if !slices.IsSortedFunc(sel.Kept, func(a, b units.Unit) int {
		return slices.IndexFunc(us, func(u units.Unit) bool { return u.ID == a.ID }) - slices.IndexFunc(us, func(u units.Unit) bool { return u.ID == b.ID })
	}) {
		t.Errorf("kept order %v", kept)
	}
	for _, part := range [][]units.Unit{sel.Kept, sel.Removed} {
		calls := map[string]bool{}
		for _, u := range part {
			for _, c := range u.Calls {
				calls[c.ID] = true
			}
		}
		for _, u := range part {
			if u.Kind == units.KindToolResult && !calls[u.CallID] {
				t.Errorf("result %s separated from its call %s", u.ID, u.CallID)
			}
		}
	}
}

func TestInsertAfterInstructions(t *testing.T) {
	sel := Selection{Kept: []units.Unit{
		{ID: "system-T1", Role: "system", Kind: units.KindMessage},
		{ID: "task-T1", Role: "user", Kind: units.KindMessage},
		{ID: "parent-T1", Role: "user", Kind: units.KindMessage},
		{ID: "assistant-2", Role: "assistant", Kind: units.KindMessage},
		{ID: "critique-3", Role: "user", Kind: units.KindMessage},
	}}
	got := ids(insertAfterInstructions(sel, units.Unit{ID: "pruned-4"}))
	if want := []string{"system-T1", "task-T1", "parent-T1", "pruned-4", "assistant-2", "critique-3"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
