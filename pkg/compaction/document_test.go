package compaction

import (
	"errors"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

func TestDecodeDocumentErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"not JSON", `{"limit_tokens": 8000,`, "bad JSON"},
		{"not an object", `[1, 2]`, "want a JSON object, got array"},
		{"unknown top-level field", `{"limit_tokens": 8000, "units": [], "limit": 3}`, "field limit: unknown field"},
		{"missing limit", `{"units": []}`, "field limit_tokens: required"},
		{"zero limit", `{"limit_tokens": 0, "units": []}`, "field limit_tokens: must be greater than 0, got 0"},
		{"limit wrong type", `{"limit_tokens": "8000", "units": []}`, "field limit_tokens: want integer, got string"},
		{"limit fractional", `{"limit_tokens": 80.5, "units": []}`, "field limit_tokens: want integer, got number"},
		{"missing units", `{"limit_tokens": 8000}`, "field units: required"},
		{"units not an array", `{"limit_tokens": 8000, "units": {}}`, "field units: want array, got object"},
		{"negative current turn", `{"limit_tokens": 8000, "current_turn": -1, "units": []}`, "field current_turn: must not be negative"},
		{"unknown task field", `{"limit_tokens": 8000, "task": {"goal": "x", "owner": "me"}, "units": []}`, "task: field owner: unknown field"},
		{"unknown phase", `{"limit_tokens": 8000, "task": {"goal": "x", "phase": "testing"}, "units": []}`, `task: field phase: unknown phase "testing"`},
		{"unknown kind", `{"limit_tokens": 8000, "units": [
			{"id": "u1", "role": "system", "kind": "message", "content": "s"},
			{"id": "u2", "role": "user", "kind": "message", "content": "t"},
			{"id": "u3", "role": "assistant", "kind": "message", "content": "a"},
			{"id": "u4", "role": "assistant", "kind": "foo", "content": "x"}]}`, `units[3] (id "u4"): field kind: unknown kind "foo"`},
		{"unknown role", `{"limit_tokens": 8000, "units": [{"id": "u1", "role": "robot", "kind": "message"}]}`, `units[0] (id "u1"): field role: unknown role "robot"`},
		{"unknown unit field", `{"limit_tokens": 8000, "units": [{"id": "u1", "role": "user", "kind": "message", "tokenz": 3}]}`, `units[0] (id "u1"): field tokenz: unknown field`},
		{"tokens wrong type", `{"limit_tokens": 8000, "units": [{"id": "u1", "role": "user", "kind": "message", "tokens": "many"}]}`, `units[0] (id "u1"): field tokens: want integer, got string`},
		{"negative tokens", `{"limit_tokens": 8000, "units": [{"id": "u1", "role": "user", "kind": "message", "tokens": -4}]}`, `units[0] (id "u1"): field tokens: must not be negative`},
		{"negative turn", `{"limit_tokens": 8000, "units": [{"id": "u1", "role": "user", "kind": "message", "turn": -2, "tokens": 1}]}`, `units[0] (id "u1"): field turn: must not be negative`},
		{"missing id", `{"limit_tokens": 8000, "units": [{"role": "user", "kind": "message", "tokens": 1}]}`, `units[0]: field id: required`},
		{"id wrong type", `{"limit_tokens": 8000, "units": [{"id": 7, "role": "user", "kind": "message"}]}`, `units[0]: field id: want string, got number`},
		{"duplicate id", `{"limit_tokens": 8000, "units": [
			{"id": "u1", "role": "user", "kind": "message", "tokens": 1},
			{"id": "u1", "role": "assistant", "kind": "message", "tokens": 1}]}`, `units[1] (id "u1"): field id: duplicate id (also units[0] (id "u1"))`},
		{"duplicate call", `{"limit_tokens": 8000, "units": [
			{"id": "a", "role": "assistant", "kind": "tool_call", "tool": "run", "call_id": "c1", "tokens": 1},
			{"id": "b", "role": "assistant", "kind": "tool_call", "tool": "run", "call_id": "c1", "tokens": 1}]}`, `units[1] (id "b"): field call_id: duplicate call "c1"`},
		{"two results for one call", `{"limit_tokens": 8000, "units": [
			{"id": "a", "role": "tool", "kind": "tool_result", "call_id": "c1", "tokens": 1},
			{"id": "b", "role": "tool", "kind": "tool_result", "call_id": "c1", "tokens": 1}]}`, `units[1] (id "b"): field call_id: a second result for call "c1"`},
		{"args a number", `{"limit_tokens": 8000, "units": [{"id": "a", "role": "assistant", "kind": "tool_call", "args": 3, "tokens": 1}]}`, `units[0] (id "a"): field args: want object or string, got number`},
		{"calls on a user message", `{"limit_tokens": 8000, "units": [{"id": "a", "role": "user", "kind": "message", "tokens": 1, "calls": [{"id": "c1", "name": "run", "args": "{}"}]}]}`, `units[0] (id "a"): field calls: only an assistant message carries calls`},
		{"unknown call field", `{"limit_tokens": 8000, "units": [{"id": "a", "role": "assistant", "kind": "message", "tokens": 1, "calls": [{"id": "c1", "name": "run", "arguments": "{}"}]}]}`, `units[0] (id "a"): calls[0]: field arguments: unknown field`},
		{"call without name", `{"limit_tokens": 8000, "units": [{"id": "a", "role": "assistant", "kind": "message", "tokens": 1, "calls": [{"id": "c1", "args": "{}"}]}]}`, `units[0] (id "a"): calls[0]: field name: required`},
		{"expanded call id taken", `{"limit_tokens": 8000, "units": [
			{"id": "a#c1", "role": "assistant", "kind": "message", "tokens": 1},
			{"id": "a", "role": "assistant", "kind": "message", "tokens": 1, "calls": [{"id": "c1", "name": "run", "args": "{}"}]}]}`, `units[1] (id "a"): calls[0]: its unit id "a#c1" is already taken by units[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeDocument([]byte(tt.in))
			if err == nil {
				t.Fatalf("DecodeDocument accepted %s", tt.in)
			}
			if !errors.Is(err, ErrInvalidDocument) {
				t.Errorf("error %q does not wrap ErrInvalidDocument", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n got: %s\nwant it to contain: %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestDecodeDocumentTokensAndTurns(t *testing.T) {
	in := `{"limit_tokens": 8000, "task": {"goal": "g"}, "units": [
		{"id": "s", "role": "system", "kind": "message", "content": "You are the Builder of Ralph mesh."},
		{"id": "given", "role": "user", "kind": "message", "content": "a long text that is not counted", "tokens": 0, "turn": 2},
		{"id": "a", "role": "assistant", "kind": "message", "content": "Reading it.", "turn": 5,
		 "calls": [{"id": "c1", "name": "read_file", "args": "{\"path\":\"docs/x.md\"}"}]},
		{"id": "r", "role": "tool", "kind": "tool_result", "tool": "read_file", "call_id": "c1", "content": "hello", "turn": 5, "tokens": 7},
		{"id": "orphan", "role": "tool", "kind": "tool_result", "tool": "run", "call_id": "gone", "content": "exit code 0", "turn": 4, "tokens": 3},
		{"id": "call", "role": "assistant", "kind": "tool_call", "tool": "run", "call_id": "c9", "args": {"command": "go test ./..."}, "turn": 5}
	]}`
	doc, err := DecodeDocument([]byte(in))
	if err != nil {
		t.Fatalf("DecodeDocument: %v", err)
	}
	if doc.CurrentTurn != 5 {
		t.Errorf("current_turn absent: got %d, want the latest unit turn 5", doc.CurrentTurn)
	}
	byID := map[string]units.Unit{}
	for _, u := range doc.Units {
		byID[u.ID] = u
	}
	if byID["s"].Tokens == 0 {
		t.Errorf("a unit without tokens was not counted")
	}
	if byID["given"].Tokens != 0 {
		t.Errorf("tokens given as 0 must be taken as is, got %d", byID["given"].Tokens)
	}
	if byID["r"].Tokens != 7 {
		t.Errorf("given tokens changed: %d", byID["r"].Tokens)
	}
	// The assistant message counts its calls too, as the builder does.
	if got := byID["a"].Tokens; got <= 3 {
		t.Errorf("assistant message with a call counted %d tokens; the call's name and args must count", got)
	}
	if got := byID["call"].Tokens; got < 5 {
		t.Errorf("tool_call counted %d tokens; its tool name and args must count", got)
	}
}

func TestDocumentValidateForCodeBuiltDocuments(t *testing.T) {
	doc := newDoc(1000, 3, "g").build()
	if err := doc.Validate(); err != nil {
		t.Fatalf("valid document rejected: %v", err)
	}
	doc.LimitTokens = -5
	if err := doc.Validate(); err == nil || !strings.Contains(err.Error(), "field limit_tokens") {
		t.Errorf("negative limit: got %v", err)
	}
	if _, err := Plan(doc, DefaultOptions(), History{}); !errors.Is(err, ErrInvalidDocument) {
		t.Errorf("Plan accepted an invalid document: %v", err)
	}
}

func TestExpandAndCollapseCalls(t *testing.T) {
	stored := []units.Unit{
		{ID: "system-T1", Role: "system", Kind: units.KindMessage, Content: "sys", Tokens: 10},
		{ID: "assistant-3", Role: "assistant", Kind: units.KindMessage, Content: "Reading two files.", Turn: 1, Tokens: 41,
			Calls: []units.Call{{ID: "call_a", Name: "read_file", Args: `{"path":"a.go"}`}, {ID: "call_b", Name: "run", Args: `not json`}}},
		{ID: "tool-3-0", Role: "tool", Kind: units.KindToolResult, Tool: "read_file", CallID: "call_a", Content: "package a", Turn: 1, Tokens: 3},
	}
	view := ExpandCalls(stored)
	ids := []string{}
	for _, u := range view {
		ids = append(ids, u.ID)
	}
	want := []string{"system-T1", "assistant-3", "assistant-3#call_a", "assistant-3#call_b", "tool-3-0"}
	if strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("expanded ids %v, want %v", ids, want)
	}
	if units.Total(view) != units.Total(stored) {
		t.Errorf("expansion changed the total: %d, want %d", units.Total(view), units.Total(stored))
	}
	c := view[2]
	if c.Kind != units.KindToolCall || c.Tool != "read_file" || c.CallID != "call_a" || string(c.Args) != `{"path":"a.go"}` || c.Turn != 1 {
		t.Errorf("call unit = %+v", c)
	}
	if string(view[3].Args) != `"not json"` {
		t.Errorf("invalid JSON args must be wrapped as a JSON string, got %s", view[3].Args)
	}
	if len(view[1].Calls) != 0 {
		t.Errorf("the message keeps its calls in the planner view")
	}
	if len(stored[1].Calls) != 2 {
		t.Errorf("ExpandCalls modified its input")
	}
	if m, cid := SplitCallUnitID("assistant-3#call_a"); m != "assistant-3" || cid != "call_a" {
		t.Errorf("SplitCallUnitID = %q, %q", m, cid)
	}
	if m, cid := SplitCallUnitID("tool-3-0"); m != "tool-3-0" || cid != "" {
		t.Errorf("SplitCallUnitID of a plain id = %q, %q", m, cid)
	}

	back := CollapseCalls(view)
	if len(back) != len(stored) {
		t.Fatalf("collapse gave %d units, want %d", len(back), len(stored))
	}
	for i := range stored {
		s, b := stored[i], back[i]
		if s.ID != b.ID || s.Tokens != b.Tokens || len(s.Calls) != len(b.Calls) {
			t.Errorf("unit %d: collapsed %+v, want %+v", i, b, s)
			continue
		}
		for j := range s.Calls {
			if s.Calls[j] != b.Calls[j] {
				t.Errorf("unit %d call %d: %+v, want %+v", i, j, b.Calls[j], s.Calls[j])
			}
		}
	}
}

func TestPlanExpandsStoredCalls(t *testing.T) {
	// The Summarizer hands the planner stored units; the plan speaks of
	// the call units and never separates a call from its result.
	doc := newDoc(1000, 10, "fix the build").build()
	doc.Units = append(doc.Units,
		units.Unit{ID: "assistant-2", Role: "assistant", Kind: units.KindMessage, Content: "Running the tests.", Turn: 2, Tokens: 30,
			Calls: []units.Call{{ID: "call_1", Name: "run", Args: `{"command":"go test ./..."}`}}},
		units.Unit{ID: "tool-2-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "call_1", Content: "FAIL pkg/a", Turn: 2, Tokens: 600},
	)
	r := mustPlan(t, doc, opts(halfTarget), History{})
	if _, ok := r.Lanes["assistant-2#call_1"]; !ok {
		t.Fatalf("lanes miss the expanded call unit: %v", r.Lanes)
	}
	if r.Lanes["assistant-2#call_1"] != r.Lanes["tool-2-0"] {
		t.Errorf("a call and its result in different lanes: %v", r.Lanes)
	}
	if _, ok := opOn(r, "tool-2-0"); !ok {
		t.Errorf("the big tool output was not planned: %+v", r.Ops)
	}
}
