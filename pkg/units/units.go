// Package units owns the Builder's context model: a list of units (messages,
// tool calls, tool results, summaries), each with a stable id, its token
// count and the turn it was last used. The shape is the one docs/REFERENCE.md
// gives for the context document, so the same units feed the model and the
// compaction planner.
package units

import (
	"encoding/json"

	openai "github.com/sashabaranov/go-openai"
)

// Kinds of unit.
const (
	KindMessage    = "message"
	KindToolCall   = "tool_call"
	KindToolResult = "tool_result"
	KindSummary    = "summary"
)

// Unit is one piece of context.
type Unit struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Kind    string          `json:"kind"`
	Tool    string          `json:"tool,omitempty"`
	CallID  string          `json:"call_id,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	Content string          `json:"content"`
	Turn    int             `json:"turn"`
	Tokens  int             `json:"tokens,omitempty"`
	// Calls holds the tool calls of an assistant message: the model sees
	// them on the assistant message, the planner sees each as its own
	// tool_call unit id (ID + "#" + call id) so a call and its result can be
	// kept together.
	Calls []Call `json:"calls,omitempty"`
	// Artifact is the id of the full output when Content is a pointer.
	Artifact string `json:"artifact,omitempty"`
}

// Call is a tool call made by an assistant message.
type Call struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Args string `json:"args"`
}

// Messages renders units as chat messages in order.
func Messages(us []Unit) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(us))
	for _, u := range us {
		m := openai.ChatCompletionMessage{Role: u.Role, Content: u.Content}
		switch {
		case u.Role == openai.ChatMessageRoleTool:
			m.ToolCallID = u.CallID
			m.Name = u.Tool
		case len(u.Calls) > 0:
			for _, c := range u.Calls {
				m.ToolCalls = append(m.ToolCalls, openai.ToolCall{
					ID: c.ID, Type: openai.ToolTypeFunction,
					Function: openai.FunctionCall{Name: c.Name, Arguments: c.Args},
				})
			}
		}
		out = append(out, m)
	}
	return out
}

// Total sums the units' token counts.
func Total(us []Unit) int {
	n := 0
	for _, u := range us {
		n += u.Tokens
	}
	return n
}

// ArgsJSON is a tool call's arguments as JSON: valid JSON as it is, anything
// else (a model's malformed arguments) wrapped as a JSON string, so a unit
// or a record never carries invalid JSON.
func ArgsJSON(args string) json.RawMessage {
	if args == "" {
		return nil
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}

// ArgsText undoes ArgsJSON. A JSON string whose content is not itself valid
// JSON was wrapped by ArgsJSON and is unwrapped; arguments that were a JSON
// string literal to begin with (never seen from a tool-calling model, whose
// arguments are objects) would be unwrapped too.
func ArgsText(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil && !json.Valid([]byte(s)) {
		return s
	}
	return string(raw)
}
