package compactbench

import (
	"slices"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/units"
)

// truncate is the naive baseline: it drops the oldest steps after the
// first keep units (the system prompt and the task) until the context is
// at most target tokens. A step is an assistant message with the results
// of its calls, dropped whole, so that no call is ever separated from its
// result; the latest step is never dropped. Nothing is summarised: what is
// dropped is gone.
func truncate(stored []units.Unit, target, keep int) ([]units.Unit, Compaction) {
	c := Compaction{Tier: "truncate", TokensBefore: units.Total(stored), Ops: map[string]int{}}
	steps := stepsOf(stored[keep:])
	total := c.TokensBefore
	drop := 0
	for drop < len(steps)-1 && total > target {
		total -= units.Total(steps[drop])
		drop++
	}
	out := slices.Clone(stored[:keep])
	for _, st := range steps[drop:] {
		out = append(out, st...)
	}
	if drop > 0 {
		c.Ops["drop_step"] = drop
	}
	c.TokensAfter = units.Total(out)
	c.TargetMet = c.TokensAfter <= target
	return out, c
}

// stepsOf groups units into steps: each assistant message starts one, and
// the units after it (its calls' results) belong to it.
func stepsOf(us []units.Unit) [][]units.Unit {
	var steps [][]units.Unit
	for _, u := range us {
		if u.Role == openai.ChatMessageRoleAssistant || len(steps) == 0 {
			steps = append(steps, nil)
		}
		steps[len(steps)-1] = append(steps[len(steps)-1], u)
	}
	return steps
}
