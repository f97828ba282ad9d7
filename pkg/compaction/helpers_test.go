package compaction

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

// docBuilder builds planner documents with explicit token counts, so that
// tests control every number the plan depends on.
type docBuilder struct{ doc Document }

// newDoc starts a document with a 100-token system prompt and task.
func newDoc(limit, current int, goal string) *docBuilder {
	b := &docBuilder{doc: Document{LimitTokens: limit, CurrentTurn: current, Task: Task{Goal: goal}}}
	b.add(units.Unit{ID: "system", Role: "system", Kind: units.KindMessage, Content: "You are the Builder.", Tokens: 100})
	b.add(units.Unit{ID: "task", Role: "user", Kind: units.KindMessage, Content: "Task T1: " + goal, Tokens: 100})
	return b
}

func (b *docBuilder) add(u units.Unit) *docBuilder {
	b.doc.Units = append(b.doc.Units, u)
	return b
}

func (b *docBuilder) msg(id, role string, turn, tokens int, content string) *docBuilder {
	return b.add(units.Unit{ID: id, Role: role, Kind: units.KindMessage, Content: content, Turn: turn, Tokens: tokens})
}

// tool adds the pair "c-<id>" (call) and "<id>" (result), call id id.
func (b *docBuilder) tool(id string, turn int, name, args string, callTokens, resultTokens int, output string) *docBuilder {
	b.add(units.Unit{ID: "c-" + id, Role: "assistant", Kind: units.KindToolCall, Tool: name, CallID: id,
		Args: json.RawMessage(args), Turn: turn, Tokens: callTokens})
	return b.add(units.Unit{ID: id, Role: "tool", Kind: units.KindToolResult, Tool: name, CallID: id,
		Content: output, Turn: turn, Tokens: resultTokens})
}

func (b *docBuilder) build() Document { return b.doc }

func pathArgs(path string) string { return fmt.Sprintf(`{"path":%q}`, path) }

func writeArgs(path, content string) string {
	b, _ := json.Marshal(map[string]string{"path": path, "content": content})
	return string(b)
}

func runArgs(cmd string) string { return fmt.Sprintf(`{"command":%q}`, cmd) }

func opts(mut func(*Options)) Options {
	o := DefaultOptions()
	if mut != nil {
		mut(&o)
	}
	return o
}

func mustPlan(t *testing.T, doc Document, o Options, h History) Result {
	t.Helper()
	r, err := Plan(doc, o, h)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return r
}

func opOn(r Result, unit string) (Op, bool) {
	for _, op := range r.Ops {
		if op.Unit == unit {
			return op, true
		}
		for _, u := range op.Units {
			if u == unit {
				return op, true
			}
		}
	}
	return Op{}, false
}

func skipOf(r Result, unit string) (Skip, bool) {
	for _, s := range r.Skipped {
		if s.Unit == unit {
			return s, true
		}
	}
	return Skip{}, false
}

func opUnits(r Result) []string {
	var out []string
	for _, op := range r.Ops {
		out = append(out, op.Unit)
	}
	return out
}

func unitCall(id, callID string, turn, tokens int) units.Unit {
	return units.Unit{ID: id, Role: "assistant", Kind: units.KindToolCall, Tool: "run", CallID: callID,
		Args: json.RawMessage(runArgs("make " + id)), Turn: turn, Tokens: tokens}
}

func unitResult(id, callID string, turn, tokens int) units.Unit {
	return units.Unit{ID: id, Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: callID,
		Content: "output of " + id, Turn: turn, Tokens: tokens}
}

func unitSummary(id string, turn, tokens int) units.Unit {
	return units.Unit{ID: id, Role: "user", Kind: units.KindSummary, Content: "## Key Decisions\n- earlier work", Turn: turn, Tokens: tokens}
}

// halfTarget aims plans at half the limit, the target the fixtures of the
// tests about gates, costs and order were sized for before the default
// became deeper (Options.TargetRatio): they test those rules, not depth.
func halfTarget(o *Options) { o.TargetRatio = 0.5 }

// opIndex is the position in r.Ops of the op that takes unit, -1 if none.
func opIndex(r Result, unit string) int {
	for k, op := range r.Ops {
		if op.Unit == unit || slices.Contains(op.Units, unit) {
			return k
		}
	}
	return -1
}
