package pruner

import (
	"encoding/json"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Selection is which stored units a pruned context keeps verbatim and which
// it removes (to be described by the note).
type Selection struct {
	Kept    []units.Unit
	Removed []units.Unit
	// Why says, per kept unit id, what protects it.
	Why map[string]string
}

// Select decides, without I/O, what survives a prune. Kept whole, in their
// order: the system prompt; units the planner puts in the instruction lane
// (the task and its acceptance criteria, the latest instruction) or the
// active_write lane (what the task is writing and the latest reads of it);
// and the most recent failure of each distinct call, so the builder still
// sees the error it must get past, once. Everything else (completed steps,
// tangents, repeats of the same failure) is removed. An assistant message
// and the results of its calls are one group: kept or removed together, so
// a call never loses its result. Earlier summaries and prune notes are
// removed too: the new note covers them.
func Select(doc compaction.Document) Selection {
	lanes := compaction.Classify(doc)
	us := doc.Units
	why := map[string]string{}
	for _, u := range us {
		switch {
		case u.Role == openai.ChatMessageRoleSystem:
			why[u.ID] = "system prompt"
		case u.Kind == units.KindSummary:
		case lanes[u.ID] == compaction.LaneInstruction:
			why[u.ID] = "instruction"
		case lanes[u.ID] == compaction.LaneActiveWrite:
			why[u.ID] = "active writing"
		}
		for _, c := range u.Calls {
			// The planner sees each call as its own unit.
			switch lanes[u.ID+"#"+c.ID] {
			case compaction.LaneActiveWrite:
				why[u.ID] = "active writing"
			case compaction.LaneInstruction:
				why[u.ID] = "instruction"
			}
		}
	}
	// The latest failure of each distinct call (tool + arguments).
	latest := map[string]string{}
	for _, u := range us {
		if u.Kind == units.KindToolResult && tools.TextFailed(u.Content) {
			latest[u.Tool+"\x00"+string(canonicalArgs(u.Args))] = u.ID
		}
	}
	for _, id := range latest {
		if why[id] == "" {
			why[id] = "latest error"
		}
	}

	// Group each assistant message with the results of its calls.
	group := map[string]string{}
	callOwner := map[string]string{}
	for _, u := range us {
		group[u.ID] = u.ID
		for _, c := range u.Calls {
			callOwner[c.ID] = u.ID
		}
	}
	for _, u := range us {
		if u.Kind == units.KindToolResult && u.CallID != "" {
			if owner, ok := callOwner[u.CallID]; ok {
				group[u.ID] = owner
			}
		}
	}
	keepGroup := map[string]bool{}
	for _, u := range us {
		if why[u.ID] != "" {
			keepGroup[group[u.ID]] = true
		}
	}
	sel := Selection{Why: why}
	for _, u := range us {
		if keepGroup[group[u.ID]] {
			if why[u.ID] == "" {
				why[u.ID] = "pairs with " + group[u.ID]
			}
			sel.Kept = append(sel.Kept, u)
		} else {
			sel.Removed = append(sel.Removed, u)
		}
	}
	return sel
}

// canonicalArgs makes {"a":1, "b":2} and {"b":2,"a":1} the same call.
func canonicalArgs(raw json.RawMessage) []byte {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	b, _ := json.Marshal(v)
	return b
}
