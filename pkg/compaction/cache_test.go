package compaction

import (
	"slices"
	"testing"
)

// The rules that keep a provider's prompt cache warm: compact deep and
// seldom, never rewrite the stable head, rewrite the oldest run of units as
// one block.

// hysteresisDoc: two old run outputs only the checkpoint can take, and two
// drafts being written (protected). 6790 tokens with 2000-token log1 and
// 1500-token drafts; the largest step is log1's.
func hysteresisDoc(limit, log1, draft int) Document {
	return newDoc(limit, 10, "write the report").
		tool("log1", 2, "run", runArgs("make all"), 10, log1, "log one").
		tool("log2", 3, "run", runArgs("make test"), 10, 1500, "log two").
		tool("d1", 4, "write_file", writeArgs("intro.md", "The intro."), draft, 10, "wrote").
		tool("d2", 5, "write_file", writeArgs("report.md", "The report."), draft, 10, "wrote").
		msg("assistant-10", "assistant", 10, 50, "Next.").
		build()
}

func TestPlanHysteresis(t *testing.T) {
	if o := DefaultOptions(); o.TargetRatio > o.PressureRatio/2 {
		t.Fatalf("default target %.2f is not well below the trigger %.2f", o.TargetRatio, o.PressureRatio)
	}
	t.Run("under pressure, a plan short of the target waits", func(t *testing.T) {
		// 6790 of 9000: the merge alone leaves 4094 of a 3150 target; one
		// more step like log1's still fits.
		r := mustPlan(t, hysteresisDoc(9000, 2000, 1500), withAdvisor(func(o *Options) { o.TargetRatio = 0.35 }), History{})
		if r.Tier != TierPressure || len(r.Ops) != 0 || r.TokensAfter != r.TokensBefore || r.TargetMet || r.LLMCalls != 0 {
			t.Fatalf("tier %s, ops %+v, after %d of %d", r.Tier, r.Ops, r.TokensAfter, r.TokensBefore)
		}
		for _, id := range []string{"c-log1", "log1", "c-log2", "log2"} {
			if s, ok := skipOf(r, id); !ok || s.Reason != SkipUnachievableRatio || s.Op != OpCheckpointMerge {
				t.Errorf("%s: skip %+v, want the merge it was in, unachievable_ratio", id, s)
			}
		}
		if s, _ := skipOf(r, "c-d2"); s.Reason != SkipProtectedLane {
			t.Errorf("the draft: %+v", s)
		}
		if r.Advisor.Status == AdvisorPending || len(r.NearTies) != 0 {
			t.Errorf("a plan that waits asks the advisor nothing: %+v", r.Advisor)
		}
	})
	t.Run("under pressure, too close to the limit to wait", func(t *testing.T) {
		// 7190 of 9000: one more step like log1's (2410) would not fit;
		// after the merge (4174) it would.
		r := mustPlan(t, hysteresisDoc(9000, 2400, 1500), DefaultOptions(), History{})
		if r.Tier != TierPressure || r.TargetMet || opIndex(r, "log1") < 0 {
			t.Fatalf("tier %s, met %v, ops %v: want the merge carried out short of the target", r.Tier, r.TargetMet, opUnits(r))
		}
		// A plan that would not keep the next step within the limit waits
		// all the same: 6800 of 9000, a recent 2510-token step, and the
		// merge of the one old log saves 208.
		doc := newDoc(9000, 10, "write the report").
			tool("log", 2, "run", runArgs("make all"), 10, 400, "log").
			tool("d1", 4, "write_file", writeArgs("a.md", "A."), 1500, 10, "wrote").
			tool("d2", 5, "write_file", writeArgs("b.md", "B."), 1500, 10, "wrote").
			tool("d3", 6, "write_file", writeArgs("c.md", "C."), 600, 10, "wrote").
			tool("big", 9, "read_file", pathArgs("big.txt"), 10, 2500, "big").
			msg("assistant-10", "assistant", 10, 50, "Next.").
			build()
		r = mustPlan(t, doc, DefaultOptions(), History{})
		if s, _ := skipOf(r, "log"); r.Tier != TierPressure || len(r.Ops) != 0 || s.Reason != SkipUnachievableRatio || s.Op != OpCheckpointMerge {
			t.Fatalf("tier %s, ops %v, log %+v: want the merge waiting", r.Tier, opUnits(r), s)
		}
		// So does one that keeps the next step within the limit but covers
		// only a sliver of the way to the target: 6800 of 9000, a recent
		// 2310-token step, and the merge's 208 tokens are less than a
		// quarter of the 3650 needed.
		setTokens(doc, "big", 2300)
		setTokens(doc, "c-d3", 800)
		r = mustPlan(t, doc, DefaultOptions(), History{})
		if r.TokensBefore != 6800 || len(r.Ops) != 0 {
			t.Fatalf("%d tokens, ops %v: want the sliver waiting", r.TokensBefore, opUnits(r))
		}
		if r = mustPlan(t, doc, opts(func(o *Options) { o.MinTargetShare = 0.05 }), History{}); opIndex(r, "log") < 0 {
			t.Fatalf("with MinTargetShare 0.05 the merge is relief enough: ops %v", opUnits(r))
		}
	})
	t.Run("under pressure, a plan that reaches the target goes deep", func(t *testing.T) {
		// 500-token drafts: 4790 of 6500, target 2275.
		r := mustPlan(t, hysteresisDoc(6500, 2000, 500), DefaultOptions(), History{})
		if r.Tier != TierPressure || !r.TargetMet || r.TokensAfter > int(0.35*6500) {
			t.Fatalf("tier %s, met %v, after %d: want at most 35%% of the limit", r.Tier, r.TargetMet, r.TokensAfter)
		}
	})
	t.Run("at the critical tier the plan is carried out", func(t *testing.T) {
		r := mustPlan(t, hysteresisDoc(7400, 2000, 1500), DefaultOptions(), History{})
		if r.Tier != TierCritical || !r.TargetMet || opIndex(r, "log1") < 0 {
			t.Fatalf("tier %s, met %v, ops %v", r.Tier, r.TargetMet, opUnits(r))
		}
	})
	t.Run("tiered, the static baseline, compacts part of the way", func(t *testing.T) {
		r := mustPlan(t, hysteresisDoc(9000, 2000, 1500), opts(func(o *Options) { o.Mode = ModeTiered }), History{})
		if len(r.Ops) == 0 || r.TargetMet {
			t.Fatalf("ops %v, met %v", opUnits(r), r.TargetMet)
		}
	})
}

// TestPlanNeverRewritesTheStableHead: the leading system and user messages
// of turn 0 (here a memory note after the task) are never touched, in any
// mode, even when nothing else can reach the target.
func TestPlanNeverRewritesTheStableHead(t *testing.T) {
	doc := newDoc(3000, 10, "write the notes").
		msg("memory", "user", 0, 600, "Project notes: the build uses make; docs live in docs/.").
		tool("log", 2, "run", runArgs("make"), 10, 1500, "log").
		tool("w", 3, "write_file", writeArgs("notes.md", "The notes."), 500, 10, "wrote").
		msg("assistant-10", "assistant", 10, 50, "Next.").
		build()
	for _, mode := range []Mode{ModeLegacy, ModeTiered, ModeTieredAdaptive} {
		r := mustPlan(t, doc, opts(func(o *Options) { o.Mode, o.TargetRatio = mode, 0.05 }), History{})
		if r.Tier != TierCritical || len(r.Ops) == 0 {
			t.Fatalf("%s: tier %s, ops %v", mode, r.Tier, r.Ops)
		}
		for _, id := range []string{"system", "task", "memory"} {
			if k := opIndex(r, id); k >= 0 {
				t.Errorf("%s: the head's %s is rewritten: %+v", mode, id, r.Ops[k])
			}
			if s, ok := skipOf(r, id); mode != ModeLegacy && (!ok || s.Reason != SkipProtectedLane) {
				t.Errorf("%s: %s skipped %+v, want protected_lane", mode, id, s)
			}
			if r.Lanes[id] != LaneInstruction {
				t.Errorf("%s: lane of %s %q", mode, id, r.Lanes[id])
			}
		}
	}
}

// TestPlanMergesTheOldestRunAsOneBlock: tiered_adaptive rewrites the
// oldest run of stale units after the head as one checkpoint, one call,
// before any single rewrite; tiered rewrites units one by one, by harm per
// token, wherever they are.
func TestPlanMergesTheOldestRunAsOneBlock(t *testing.T) {
	doc := tracesDoc(7600) // critical, six traces t0..t5 of different sizes
	view := ExpandCalls(doc.Units)
	head := StableHead(view)

	r := mustPlan(t, doc, DefaultOptions(), History{})
	if len(r.Ops) == 0 || r.Ops[0].Op != OpCheckpointMerge {
		t.Fatalf("tiered_adaptive: ops %+v, want a merge first", r.Ops)
	}
	var run []string
	for _, u := range view[head : head+len(r.Ops[0].Units)] {
		run = append(run, u.ID)
	}
	if !slices.Equal(r.Ops[0].Units, run) {
		t.Errorf("merged %v, want the run right after the head %v", r.Ops[0].Units, run)
	}
	if r.Ops[0].Units[0] != "c-t0" || len(r.Ops[0].Units) < 4 {
		t.Errorf("merged %v: want the oldest traces, several of them", r.Ops[0].Units)
	}
	for _, op := range r.Ops[1:] {
		if op.Op == OpCheckpointMerge {
			t.Errorf("a second merge: %+v", op)
		}
	}

	tiered := mustPlan(t, doc, opts(func(o *Options) { o.Mode = ModeTiered }), History{})
	if len(tiered.Ops) == 0 || tiered.Ops[0].Unit != "t3" || tiered.Ops[0].Op != OpCompactToolOutput {
		t.Errorf("tiered: ops %v, want the largest trace t3 first", opUnits(tiered))
	}
}
