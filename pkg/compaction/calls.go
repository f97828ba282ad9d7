package compaction

import (
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/units"
)

// callSeparator joins a message id and a call id into the id of the call's
// unit. The builder's ids never contain it, so the split is unambiguous.
const callSeparator = "#"

func callUnitID(msgID, callID string) string { return msgID + callSeparator + callID }

// SplitCallUnitID maps a planner unit id back to the stored unit it lives
// in: "assistant-3#call_1" is call "call_1" of "assistant-3". Any other id
// is its own stored unit, with callID "".
func SplitCallUnitID(id string) (unitID, callID string) {
	if m, c, ok := strings.Cut(id, callSeparator); ok && m != "" && c != "" {
		return m, c
	}
	return id, ""
}

// ExpandCalls returns the planner's view of stored units: each assistant
// message carrying Calls becomes the message without them, followed by one
// tool_call unit per call (id msgID+"#"+callID, Tool, CallID and Args set),
// so that a call can be paired with its result and compacted on its own.
// The message's tokens are shared out by the bytes each part holds, so the
// total is unchanged. Other units are copied as they are; us is not
// modified. CollapseCalls is the inverse.
func ExpandCalls(us []units.Unit) []units.Unit {
	out := make([]units.Unit, 0, len(us))
	for _, u := range us {
		if len(u.Calls) == 0 {
			out = append(out, u)
			continue
		}
		weights := make([]int, len(u.Calls))
		total := len(u.Content)
		for j, c := range u.Calls {
			weights[j] = len(c.Name) + len(c.Args)
			total += weights[j]
		}
		msg := u
		msg.Calls = nil
		calls := make([]units.Unit, len(u.Calls))
		left := u.Tokens
		for j, c := range u.Calls {
			share := 0
			if total > 0 {
				share = u.Tokens * weights[j] / total
			}
			left -= share
			calls[j] = units.Unit{
				ID: callUnitID(u.ID, c.ID), Role: openai.ChatMessageRoleAssistant, Kind: units.KindToolCall,
				Tool: c.Name, CallID: c.ID, Args: units.ArgsJSON(c.Args), Turn: u.Turn, Tokens: share,
			}
		}
		// The rounding remainder stays with the message, so the sum is exact.
		msg.Tokens = left
		out = append(out, msg)
		out = append(out, calls...)
	}
	return out
}

// CollapseCalls is the inverse of ExpandCalls: tool_call units whose id is
// msgID+"#"+callID go back into the Calls of message msgID, with their
// tokens. A tool_call unit whose message is not in view stays a unit.
func CollapseCalls(view []units.Unit) []units.Unit {
	msgAt := map[string]int{}
	for i, u := range view {
		if u.Kind == units.KindMessage && u.Role == openai.ChatMessageRoleAssistant {
			msgAt[u.ID] = i
		}
	}
	out := make([]units.Unit, 0, len(view))
	pos := map[string]int{}
	for _, u := range view {
		if u.Kind == units.KindToolCall {
			if m, c := SplitCallUnitID(u.ID); c != "" {
				if _, ok := msgAt[m]; ok {
					if k, ok := pos[m]; ok {
						out[k].Calls = append(out[k].Calls, units.Call{ID: u.CallID, Name: u.Tool, Args: units.ArgsText(u.Args)})
						out[k].Tokens += u.Tokens
						continue
					}
				}
			}
		}
		if _, ok := msgAt[u.ID]; ok {
			pos[u.ID] = len(out)
			u.Calls = slices.Clone(u.Calls)
		}
		out = append(out, u)
	}
	return out
}
