package compaction

import (
	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/units"
)

// StableHead is the number of units at the start of us that make up the
// stable head: the leading run of system and user messages the task
// started with (turn 0): the system prompt, the task and its acceptance
// criteria, and whatever else the builder puts before the first step.
//
// No compaction ever rewrites the head, and the checkpoint goes right
// after it. A provider caches the longest repeated prefix of a prompt and
// every rewrite breaks that prefix from the first changed unit on, so a
// head that never changes is the part of every prompt the cache always
// holds. Stored units and the planner's expanded view have the same head.
func StableHead(us []units.Unit) int {
	n := 0
	for n < len(us) && isHeadUnit(us[n]) {
		n++
	}
	return n
}

func isHeadUnit(u units.Unit) bool {
	return u.Kind == units.KindMessage && u.Turn == 0 &&
		(u.Role == openai.ChatMessageRoleSystem || u.Role == openai.ChatMessageRoleUser)
}
