package compactbench

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

// TestCompactBenchTruncationKeepsCallsWithResults truncates the session at every
// iteration to several targets: a call and its result always stay or go
// together, the system prompt and the task always stay, and the target is
// met unless only the latest step is left.
func TestCompactBenchTruncationKeepsCallsWithResults(t *testing.T) {
	s := session(t)
	for _, target := range []int{500, 2000, 8000} {
		stored := append([]units.Unit{}, s.Initial...)
		for _, it := range s.Iterations {
			stored = append(stored, it.Units...)
			out, c := truncate(stored, target, len(s.Initial))
			if out[0].ID != "system-T1" || out[1].ID != "task-T1" {
				t.Fatalf("target %d, step %d: starts with %v", target, it.Step, ids(out[:2]))
			}
			if last := out[len(out)-1]; last.ID != stored[len(stored)-1].ID {
				t.Fatalf("target %d, step %d: the latest step was dropped", target, it.Step)
			}
			if !c.TargetMet && len(stepsOf(out[len(s.Initial):])) > 1 {
				t.Fatalf("target %d, step %d: %d tokens left with steps still to drop", target, it.Step, c.TokensAfter)
			}
			calls, results := map[string]bool{}, map[string]bool{}
			for _, u := range out {
				for _, call := range u.Calls {
					calls[call.ID] = true
				}
				if u.Kind == units.KindToolResult {
					results[u.CallID] = true
				}
			}
			for id := range calls {
				if !results[id] {
					t.Fatalf("target %d, step %d: call %s kept without its result", target, it.Step, id)
				}
			}
			for id := range results {
				if !calls[id] {
					t.Fatalf("target %d, step %d: result of %s kept without its call", target, it.Step, id)
				}
			}
			if units.Total(out) != c.TokensAfter {
				t.Fatalf("target %d, step %d: reported %d tokens, has %d", target, it.Step, c.TokensAfter, units.Total(out))
			}
			stored = out
		}
	}
}
