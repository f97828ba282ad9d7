package compaction

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/ralphmesh/ralph/pkg/units"
)

// CacheKey identifies a compaction result: the same payload compacted to the
// same target under the same label by the same model and prompt gives a
// reusable result. It is the hex SHA-256 of the five parts, each length
// prefixed so that no two different tuples hash the same bytes. Plans
// carry it (Op.CacheKey); an executor storing results must use this
// function, or the op's key, so that History.Cached matches.
func CacheKey(payload string, targetTokens int, label, model, promptVersion string) string {
	h := sha256.New()
	for _, part := range []string{payload, strconv.Itoa(targetTokens), label, model, promptVersion} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// OpPayload is the text op hands the compactor, the one its cache key was
// computed over. view is the planner's view of the units the plan was made
// from (ExpandCalls of the stored units). For a tool call it is the
// arguments, for a tool result or message its content, and for a
// checkpoint merge the checkpoint followed by each unit merged into it,
// each under a header line naming it.
func OpPayload(op Op, view []units.Unit) (string, error) {
	byID := make(map[string]int, len(view))
	for i, u := range view {
		byID[u.ID] = i
	}
	find := func(id string) (units.Unit, error) {
		i, ok := byID[id]
		if !ok {
			return units.Unit{}, fmt.Errorf("payload of %s on %s: unit %q is not in view", op.Op, op.Unit, id)
		}
		return view[i], nil
	}
	ids := op.Units
	if len(ids) == 0 {
		ids = []string{op.Unit}
	}
	ms := make([]units.Unit, 0, len(ids))
	for _, id := range ids {
		u, err := find(id)
		if err != nil {
			return "", err
		}
		ms = append(ms, u)
	}
	var checkpoint *units.Unit
	if op.Checkpoint != "" {
		u, err := find(op.Checkpoint)
		if err != nil {
			return "", err
		}
		checkpoint = &u
	}
	return payload(op.Op, ms, checkpoint), nil
}

func payload(op OpKind, ms []units.Unit, checkpoint *units.Unit) string {
	switch op {
	case OpCompactToolArgs:
		return string(ms[0].Args)
	case OpCheckpointMerge:
		var b strings.Builder
		if checkpoint != nil {
			fmt.Fprintf(&b, "[checkpoint %s]\n%s\n", checkpoint.ID, checkpoint.Content)
		}
		for _, u := range ms {
			fmt.Fprintf(&b, "[unit %s %s %s", u.ID, u.Role, u.Kind)
			if u.Tool != "" {
				fmt.Fprintf(&b, " %s", u.Tool)
			}
			b.WriteString("]\n")
			if u.Kind == units.KindToolCall && len(u.Args) > 0 {
				b.Write(u.Args)
				b.WriteString("\n")
			}
			if u.Content != "" {
				b.WriteString(u.Content)
				b.WriteString("\n")
			}
		}
		return b.String()
	default:
		return ms[0].Content
	}
}
