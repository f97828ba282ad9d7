package compaction

import (
	"fmt"
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

// memoryDoc is a task that starts with a large session memory and has
// worked for many turns, at critical pressure: nothing else can give the
// planner its target, so any unit it may touch, it does. With late, the
// memory is also repeated after the steps, out of the stable head, where
// only its id says what it is, before a later instruction.
func memoryDoc(late bool) Document {
	b := newDoc(10_000, 14, "add the report")
	b.msg(MemoryUnitID("T3"), "user", 0, 2_500, "What earlier tasks learned:\n## Critical Context\n- [T1] the tests need FOO=1: `FOO=1 sh gen.sh`")
	for turn := 1; turn <= 12; turn++ {
		id := fmt.Sprintf("r%d", turn)
		b.msg(fmt.Sprintf("a%d", turn), "assistant", turn, 40, "checking")
		b.tool(id, turn, "run", runArgs(fmt.Sprintf("sh step%d.sh", turn)), 30, 500, fmt.Sprintf("exit code 0\nstep %d done", turn))
		if late && turn == 4 {
			b.msg("memory-T3b", "user", 4, 2_500, "What earlier tasks learned, again")
		}
	}
	// A later instruction: the late memory is not the latest one.
	b.msg("nudge-13", "user", 12, 30, "You seem to repeat yourself.")
	return b.build()
}

func TestMemoryIsInstructionAndNeverCompacted(t *testing.T) {
	for _, late := range []bool{false, true} {
		doc := memoryDoc(late)
		memories := []string{MemoryUnitID("T3")}
		if late {
			memories = append(memories, "memory-T3b")
		}
		lanes := Classify(doc)
		for _, id := range memories {
			if lanes[id] != LaneInstruction {
				t.Errorf("late=%v: %s is in lane %s, want instruction", late, id, lanes[id])
			}
		}
		for _, mode := range []Mode{ModeLegacy, ModeTiered, ModeTieredAdaptive} {
			r := mustPlan(t, doc, opts(func(o *Options) { o.Mode = mode }), History{})
			if r.Tier != TierCritical {
				t.Fatalf("late=%v %s: tier %s, want critical (the fixture must press)", late, mode, r.Tier)
			}
			if len(r.Ops) == 0 {
				t.Fatalf("late=%v %s: nothing planned; the fixture must leave the planner something to do", late, mode)
			}
			for _, id := range memories {
				if op, ok := opOn(r, id); ok {
					t.Errorf("late=%v %s: the memory unit %s is touched by %s", late, mode, id, op.Op)
				}
			}
		}
	}
}

func TestIsMemoryUnit(t *testing.T) {
	for _, tt := range []struct {
		u    units.Unit
		want bool
	}{
		{units.Unit{ID: MemoryUnitID("T1"), Role: "user", Kind: units.KindMessage}, true},
		{units.Unit{ID: "memory-T1", Role: "assistant", Kind: units.KindMessage}, false},
		{units.Unit{ID: "memory-T1", Role: "user", Kind: units.KindSummary}, false},
		{units.Unit{ID: "task-T1", Role: "user", Kind: units.KindMessage}, false},
	} {
		if got := IsMemoryUnit(tt.u); got != tt.want {
			t.Errorf("IsMemoryUnit(%s %s %s) = %v, want %v", tt.u.ID, tt.u.Role, tt.u.Kind, got, tt.want)
		}
	}
}
