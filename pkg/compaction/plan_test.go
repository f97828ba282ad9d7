package compaction

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

// pressureDoc is 7650 tokens: at a 10000 limit it is under pressure (0.765)
// and the target is 5000. Two large tool traces can cover that; the draft
// being written and the critic's instruction must not be touched.
func pressureDoc(limit int) Document {
	return newDoc(limit, 10, "fix the failing build").
		msg("assistant-2", "assistant", 2, 30, "Running the tests to see what fails.").
		tool("test-run", 2, "run", runArgs("go test ./..."), 20, 3000, strings.Repeat("ok  \tpkg/x\t0.01s\n", 400)).
		msg("assistant-3", "assistant", 3, 30, "Running vet as well.").
		tool("vet-run", 3, "run", runArgs("go vet ./..."), 20, 2500, strings.Repeat("# pkg/y\nvet: fine\n", 300)).
		msg("assistant-5", "assistant", 5, 30, "Writing the fix.").
		tool("write", 5, "write_file", writeArgs("pkg/y/y.go", "package y"), 1500, 10, "wrote 1 file").
		msg("critique-6", "user", 6, 200, "The reviewer did not accept task T1: the vet warning remains.").
		msg("assistant-7", "assistant", 7, 60, "Looking at the vet output again.").
		msg("assistant-10", "assistant", 10, 50, "Re-running vet.").
		build()
}

func TestPlanNormalTierPlansNothing(t *testing.T) {
	doc := pressureDoc(20000) // 0.38 of the limit
	r := mustPlan(t, doc, DefaultOptions(), History{})
	if r.Tier != TierNormal || len(r.Ops) != 0 || len(r.Skipped) != 0 {
		t.Fatalf("normal tier: tier %s, ops %v, skipped %v", r.Tier, r.Ops, r.Skipped)
	}
	if r.TokensBefore != 7650 || r.TokensAfter != r.TokensBefore || !r.TargetMet {
		t.Errorf("tokens before %d after %d met %v", r.TokensBefore, r.TokensAfter, r.TargetMet)
	}
	if len(r.Lanes) != len(doc.Units) {
		t.Errorf("lanes are reported even when nothing is planned: %v", r.Lanes)
	}
}

func TestPlanTierThresholds(t *testing.T) {
	tests := []struct {
		limit int
		want  Tier
	}{
		{10929, TierNormal},   // 0.69997
		{10928, TierPressure}, // 0.70004
		{8500, TierCritical},  // exactly 0.90
		{8501, TierPressure},
	}
	for _, tt := range tests {
		r := mustPlan(t, pressureDoc(tt.limit), DefaultOptions(), History{})
		if r.Tier != tt.want {
			t.Errorf("7650 of %d tokens: tier %s, want %s", tt.limit, r.Tier, tt.want)
		}
		if want := int(0.35 * float64(tt.limit)); r.Tier != TierNormal && r.TargetTokens != want {
			t.Errorf("target %d, want the default 35%% of the limit, %d", r.TargetTokens, want)
		}
	}
}

func TestPlanPressureCompactsTracesAndProtectsLanes(t *testing.T) {
	// Tiered rewrites the two traces by harm per token; tiered_adaptive
	// merges the oldest run (the first trace with the chat around it) into
	// the checkpoint in one call first, then rewrites the other trace.
	for _, tt := range []struct {
		mode Mode
		ops  []string
		kind []OpKind
	}{
		{ModeTiered, []string{"test-run", "vet-run"}, []OpKind{OpCompactToolOutput, OpCompactToolOutput}},
		{ModeTieredAdaptive, []string{"assistant-2", "vet-run"}, []OpKind{OpCheckpointMerge, OpCompactToolOutput}},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			r := mustPlan(t, pressureDoc(10000), opts(func(o *Options) { halfTarget(o); o.Mode = tt.mode }), History{})
			checkPressurePlan(t, r, tt.ops, tt.kind)
		})
	}
}

func checkPressurePlan(t *testing.T, r Result, ops []string, kinds []OpKind) {
	t.Helper()
	if r.Tier != TierPressure {
		t.Fatalf("tier %s", r.Tier)
	}
	if got := opUnits(r); !slices.Equal(got, ops) {
		t.Fatalf("ops on %v, want %v", got, ops)
	}
	for k, op := range r.Ops {
		if op.Op != kinds[k] || (op.Lane != LaneToolTrace && op.Lane != LaneHistoricalChat) || !op.LLMCall {
			t.Errorf("op %+v", op)
		}
	}
	for _, id := range []string{"system", "task", "write", "c-write", "critique-6"} {
		if s, ok := skipOf(r, id); !ok || s.Reason != SkipProtectedLane {
			t.Errorf("%s: skip %+v (listed %v), want protected_lane", id, s, ok)
		}
		if _, ok := opOn(r, id); ok {
			t.Errorf("protected unit %s has an op", id)
		}
	}
	if !r.TargetMet || r.TokensAfter > r.TargetTokens {
		t.Errorf("target %d not met: %d", r.TargetTokens, r.TokensAfter)
	}
	sum := 0
	for _, op := range r.Ops {
		sum += op.TokensSaved
	}
	if r.TokensAfter != r.TokensBefore-sum {
		t.Errorf("tokens_after %d != tokens_before %d - saved %d", r.TokensAfter, r.TokensBefore, sum)
	}
}

// criticalDoc cannot reach its target from unprotected units alone: an old
// draft (draft-a.md) and the latest one (notes.md) carry most tokens.
func criticalDoc(limit int) Document {
	return newDoc(limit, 10, "write the notes").
		tool("trace", 1, "run", runArgs("go test ./..."), 20, 1000, strings.Repeat("ok pkg\n", 300)).
		msg("assistant-2", "assistant", 2, 30, "Drafting the first part.").
		tool("draft-a", 2, "write_file", writeArgs("draft-a.md", "part a"), 2000, 10, "wrote").
		msg("assistant-3", "assistant", 3, 30, "Drafting the notes.").
		tool("notes", 3, "write_file", writeArgs("notes.md", "the notes"), 3000, 10, "wrote").
		msg("critique-4", "user", 4, 300, "The reviewer did not accept task T1: mention the new settings.").
		msg("assistant-10", "assistant", 10, 50, "Editing.").
		build()
}

func TestPlanCriticalTouchesProtectedLanesOnlyAsLastResort(t *testing.T) {
	// 6560 tokens. At 7000 (0.94) the target 3500 needs the drafts; at
	// 7200 (0.91) the target 3600 too, but less of them.
	t.Run("unprotected units first, latest draft and instruction last", func(t *testing.T) {
		r := mustPlan(t, criticalDoc(7000), DefaultOptions(), History{})
		if r.Tier != TierCritical {
			t.Fatalf("tier %s", r.Tier)
		}
		trace, old, latest := opIndex(r, "trace"), opIndex(r, "c-draft-a"), opIndex(r, "c-notes")
		if trace < 0 || old < 0 || latest < 0 {
			t.Fatalf("ops %v: want the trace, then the old draft, then the latest draft", opUnits(r))
		}
		if !(trace < old && old < latest) {
			t.Errorf("op order %v: trace, old draft, latest draft expected", opUnits(r))
		}
		if s, ok := skipOf(r, "system"); !ok || s.Reason != SkipProtectedLane {
			t.Errorf("the system prompt is never touched: %+v", s)
		}
	})
	t.Run("protected lanes stay raw when the rest reaches the target", func(t *testing.T) {
		// A 5000-token trace kept as an artifact: its pointer covers the
		// target 5750 of 10650 tokens.
		doc := criticalDoc(11500)
		setTokens(doc, "trace", 5000)
		doc.Units[3].Artifact = "art-trace"
		r := mustPlan(t, doc, opts(halfTarget), History{})
		if r.Tier != TierCritical || !r.TargetMet {
			t.Fatalf("tier %s met %v", r.Tier, r.TargetMet)
		}
		for _, op := range r.Ops {
			if op.Lane == LaneActiveWrite || op.Lane == LaneInstruction {
				t.Errorf("protected unit touched although the trace sufficed: %+v", op)
			}
		}
		for _, id := range []string{"c-draft-a", "c-notes", "critique-4"} {
			if s, ok := skipOf(r, id); !ok || s.Reason != SkipProtectedLane {
				t.Errorf("%s: %+v, want protected_lane", id, s)
			}
		}
	})
	t.Run("at pressure the same drafts are never touched", func(t *testing.T) {
		r := mustPlan(t, criticalDoc(8000), DefaultOptions(), History{}) // 0.82
		if r.Tier != TierPressure {
			t.Fatalf("tier %s", r.Tier)
		}
		for _, op := range r.Ops {
			if op.Lane == LaneActiveWrite || op.Lane == LaneInstruction {
				t.Errorf("protected unit touched at pressure: %+v", op)
			}
		}
		if r.TargetMet {
			t.Errorf("target met without the drafts? %+v", r)
		}
	})
}

// tracesDoc has traces of different sizes and ages, so harm per token
// saved differs between them.
func tracesDoc(limit int) Document {
	b := newDoc(limit, 12, "fix the failing build")
	sizes := []int{400, 1600, 900, 2500, 700, 1200}
	for k, n := range sizes {
		id := fmt.Sprintf("t%d", k)
		b.tool(id, 1+k, "run", runArgs("make step"+id), 15, n, fmt.Sprintf("output of step %s\n", id))
	}
	return b.msg("assistant-12", "assistant", 12, 40, "Next step.").build()
}

func TestPlanOrdersByHarmPerTokenSaved(t *testing.T) {
	// 7630 tokens of a 7600 limit: critical; nothing is protected, so
	// every op is in one group. Merges are cooled down: single rewrites
	// are ordered among themselves.
	r := mustPlan(t, tracesDoc(7600), opts(func(o *Options) { o.MaxCallsPerIteration = 10 }), History{CooldownUntil: noMerge})
	if len(r.Ops) < 3 {
		t.Fatalf("ops %v", r.Ops)
	}
	for k := 1; k < len(r.Ops); k++ {
		if r.Ops[k].HarmPer1K < r.Ops[k-1].HarmPer1K {
			t.Errorf("op %d (%s, %.4f) before op %d (%s, %.4f): not ordered by harm per token",
				k-1, r.Ops[k-1].Unit, r.Ops[k-1].HarmPer1K, k, r.Ops[k].Unit, r.Ops[k].HarmPer1K)
		}
	}
	if r.Ops[0].Unit != "t3" {
		t.Errorf("first op on %s, want the largest trace t3", r.Ops[0].Unit)
	}
}

func TestPlanStopsAsSoonAsTargetIsMet(t *testing.T) {
	for _, limit := range []int{7600, 8000, 9000, 10000} {
		r := mustPlan(t, tracesDoc(limit), opts(func(o *Options) { o.MaxCallsPerIteration = 10 }), History{})
		if r.Tier == TierNormal {
			continue
		}
		if !r.TargetMet {
			t.Errorf("limit %d: target %d not met (%d)", limit, r.TargetTokens, r.TokensAfter)
			continue
		}
		last := r.Ops[len(r.Ops)-1]
		if r.TokensAfter+last.TokensSaved <= r.TargetTokens {
			t.Errorf("limit %d: the last op (%s) was not needed: %d + %d <= %d",
				limit, last.Unit, r.TokensAfter, last.TokensSaved, r.TargetTokens)
		}
	}
}

func TestPlanNeverSplitsACallFromItsResult(t *testing.T) {
	docs := map[string]Document{
		"pressure": pressureDoc(10000), "critical": criticalDoc(7000), "traces": tracesDoc(7600),
		"sample":          loadDoc(t, "testdata/release_notes.json"),
		"critical sample": loadDoc(t, "testdata/release_notes_critical.json"),
	}
	// A pair whose call is old and whose result is recent must not be merged.
	split := newDoc(2000, 10, "fix").
		msg("assistant-1", "assistant", 1, 600, strings.Repeat("thinking ", 200)).
		build()
	split.Units = append(split.Units,
		unitCall("c-x", "x", 2, 500), unitResult("x", "x", 10, 400),
		unitCall("c-y", "y", 3, 300), unitResult("y", "y", 3, 300))
	docs["straddling pair"] = split
	// A message whose one call is an active write cannot be merged away.
	stored := newDoc(1400, 10, "write the notes").build()
	stored.Units = append(stored.Units,
		units.Unit{ID: "assistant-2", Role: "assistant", Kind: units.KindMessage, Content: strings.Repeat("Reading and writing. ", 30), Turn: 2, Tokens: 400,
			Calls: []units.Call{{ID: "r1", Name: "run", Args: runArgs("make")}, {ID: "w1", Name: "write_file", Args: writeArgs("notes.md", "x")}}},
		units.Unit{ID: "tool-2-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "r1", Content: "ok", Turn: 2, Tokens: 300},
		units.Unit{ID: "tool-2-1", Role: "tool", Kind: units.KindToolResult, Tool: "write_file", CallID: "w1", Content: "wrote", Turn: 2, Tokens: 5},
		units.Unit{ID: "assistant-3", Role: "assistant", Kind: units.KindMessage, Content: strings.Repeat("Running it. ", 40), Turn: 3, Tokens: 400,
			Calls: []units.Call{{ID: "r2", Name: "run", Args: runArgs("make test")}}},
		units.Unit{ID: "tool-3-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "r2", Content: "ok", Turn: 3, Tokens: 300},
	)
	docs["stored bundles"] = stored
	for _, mode := range []Mode{ModeLegacy, ModeTiered, ModeTieredAdaptive} {
		for name, doc := range docs {
			r := mustPlan(t, doc, opts(func(o *Options) { o.Mode = mode }), History{})
			if r.Tier == TierNormal {
				t.Fatalf("%s: nothing to plan", name)
			}
			// What must go together: a call and its result, a message
			// and the calls expanded from it.
			view := ExpandCalls(doc.Units)
			together := map[string][]string{}
			link := func(a, b string) {
				together[a] = append(together[a], b)
				together[b] = append(together[b], a)
			}
			for i, a := range view {
				for _, b := range view[i+1:] {
					if a.CallID != "" && a.CallID == b.CallID {
						link(a.ID, b.ID)
					}
				}
				if msg, call := SplitCallUnitID(a.ID); call != "" {
					link(a.ID, msg)
				}
			}
			for _, op := range r.Ops {
				if op.Op != OpCheckpointMerge {
					if len(op.Units) > 0 {
						t.Errorf("%s/%s: %s names several units", mode, name, op.Op)
					}
					continue
				}
				for _, u := range op.Units {
					for _, other := range together[u] {
						if !slices.Contains(op.Units, other) {
							t.Errorf("%s/%s: merge takes %s without %s", mode, name, u, other)
						}
					}
				}
			}
		}
	}
}

func TestPlanFeasibilityGate(t *testing.T) {
	t.Run("realised ratio makes compaction useless", func(t *testing.T) {
		// Merging into the checkpoint is no way out either.
		h := History{Ratios: map[string][]float64{"compact_tool_output:run": {0.9, 0.95}, "checkpoint_merge": {0.92}}}
		r := mustPlan(t, pressureDoc(10000), DefaultOptions(), h)
		for _, id := range []string{"test-run", "vet-run"} {
			if s, ok := skipOf(r, id); !ok || s.Reason != SkipUnachievableRatio || s.Op != OpCompactToolOutput {
				t.Errorf("%s: %+v, want unachievable_ratio for compact_tool_output", id, s)
			}
		}
		// The same history is ignored by the static tiered mode.
		r = mustPlan(t, pressureDoc(10000), opts(func(o *Options) { o.Mode = ModeTiered }), h)
		if _, ok := opOn(r, "test-run"); !ok {
			t.Errorf("tiered mode used realised ratios: %+v", r.Skipped)
		}
	})
	t.Run("required ratio below the best achieved", func(t *testing.T) {
		// 8000 tokens asked into 1024 is 0.128, but 0.3 is the best ever.
		// 11240 tokens of 12000: critical, where a plan short of the
		// target is still carried out.
		doc := newDoc(12000, 10, "fix").
			tool("huge", 2, "run", runArgs("make all"), 20, 8000, "log").
			tool("mid", 3, "run", runArgs("make lint"), 20, 3000, "lint").
			build()
		h := History{Ratios: map[string][]float64{"compact_tool_output:run": {0.3, 0.35}, "checkpoint_merge": {0.3}}}
		r := mustPlan(t, doc, DefaultOptions(), h)
		if s, ok := skipOf(r, "huge"); !ok || s.Reason != SkipUnachievableRatio {
			t.Errorf("huge: %+v, want unachievable_ratio", s)
		}
		if op, ok := opOn(r, "mid"); !ok || op.OutputTokens != 975 {
			t.Errorf("mid: %+v, want compacted at the realised mean 0.325", op)
		}
		// Without history the floor is MinFeasibleRatio and 0.128 passes.
		r = mustPlan(t, doc, DefaultOptions(), History{CooldownUntil: noMerge})
		if op, ok := opOn(r, "huge"); !ok || op.OutputTokens != 1024 {
			t.Errorf("huge without history: %+v", op)
		}
	})
	t.Run("an unreusable unit gets no pointer fallback, a reusable one does", func(t *testing.T) {
		h := History{Ratios: map[string][]float64{"compact_tool_output:run": {0.9}}, CooldownUntil: noMerge}
		doc := pressureDoc(8400) // critical: the pointer goes ahead short of the target
		for i := range doc.Units {
			if doc.Units[i].ID == "test-run" {
				doc.Units[i].Artifact = "art-1"
			}
		}
		r := mustPlan(t, doc, DefaultOptions(), h)
		op, ok := opOn(r, "test-run")
		if !ok || op.Op != OpReplaceWithPointer || op.Pointer != "artifact:art-1" || op.LLMCall {
			t.Errorf("test-run: %+v, want a pointer to its artifact", op)
		}
	})
}

func TestPlanCallBudget(t *testing.T) {
	o := opts(func(o *Options) { o.MaxCallsPerIteration = 1 })
	r := mustPlan(t, tracesDoc(7600), o, History{})
	if r.LLMCalls != 1 {
		t.Errorf("%d calls planned, budget 1", r.LLMCalls)
	}
	exhausted := 0
	for _, s := range r.Skipped {
		if s.Reason == SkipBudgetExhausted {
			exhausted++
		}
	}
	if exhausted == 0 {
		t.Errorf("no budget_exhausted skip: %+v", r.Skipped)
	}
	// Calls already made this iteration count.
	r = mustPlan(t, tracesDoc(7600), DefaultOptions(), History{CallsThisIteration: 4})
	if r.LLMCalls != 0 || len(r.Ops) != 0 {
		t.Errorf("budget spent, still planned %+v", r.Ops)
	}
	if s, ok := skipOf(r, "t3"); !ok || s.Reason != SkipBudgetExhausted {
		t.Errorf("t3: %+v", s)
	}
	// Pointer ops need no call and go ahead.
	doc := tracesDoc(7600)
	for i := range doc.Units {
		if doc.Units[i].ID == "t1" {
			doc.Units[i].Artifact = "art-t1"
		}
	}
	r = mustPlan(t, doc, DefaultOptions(), History{CallsThisIteration: 4})
	if op, ok := opOn(r, "t1"); !ok || op.Op != OpReplaceWithPointer {
		t.Errorf("pointer refused for lack of budget: %+v", r.Ops)
	}
	// The tiered mode has no budget.
	r = mustPlan(t, tracesDoc(7600), opts(func(o *Options) { o.Mode = ModeTiered; o.MaxCallsPerIteration = 1 }), History{})
	if r.LLMCalls <= 1 {
		t.Errorf("tiered mode applied the call budget: %d calls", r.LLMCalls)
	}
}

func TestPlanCooldown(t *testing.T) {
	label := "compact_tool_output:run"
	tests := []struct {
		name string
		hist History
		cool bool
	}{
		{"overshoot streak at the limit", History{Iteration: 5, Overshoots: map[string]int{label: 2}}, true},
		{"streak below the limit", History{Iteration: 5, Overshoots: map[string]int{label: 1}}, false},
		{"cooldown running", History{Iteration: 5, CooldownUntil: map[string]int{label: 6}}, true},
		{"cooldown over", History{Iteration: 6, CooldownUntil: map[string]int{label: 6}}, false},
		{"another label cooling", History{Iteration: 5, CooldownUntil: map[string]int{"compact_tool_output:search": 9}}, false},
	}
	// Merges are cooled down too, so that they do not take the unit instead.
	withNoMerge := func(h History) History {
		h.CooldownUntil = maps.Clone(h.CooldownUntil)
		if h.CooldownUntil == nil {
			h.CooldownUntil = map[string]int{}
		}
		h.CooldownUntil["checkpoint_merge"] = 99
		return h
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The fixture's units are small: a lower no-gain floor lets the
			// cooldown, not the floor, decide.
			r := mustPlan(t, pressureDoc(10000), opts(func(o *Options) { halfTarget(o); o.MinGainTokens = 50 }), withNoMerge(tt.hist))
			s, skipped := skipOf(r, "test-run")
			if tt.cool != (skipped && s.Reason == SkipCooldown) {
				t.Errorf("test-run: skip %+v (listed %v), cooldown expected %v", s, skipped, tt.cool)
			}
			if tt.cool && s.Label != label {
				t.Errorf("skip names label %q", s.Label)
			}
		})
	}
	// Overshoots recorded through RecordOutcome start the cooldown. They
	// were another unit's (a unit already compacted is not compacted again),
	// with the same label.
	o := opts(halfTarget)
	o.MinGainTokens = 50
	h := withNoMerge(History{Iteration: 3})
	op := Op{Unit: "earlier-test-run", Op: OpCompactToolOutput, Label: label, Tokens: 3000, OutputTokens: 750, LLMCall: true}
	h.RecordOutcome(op, 900, o)
	r := mustPlan(t, pressureDoc(10000), o, h)
	if _, ok := opOn(r, "test-run"); !ok {
		t.Errorf("one overshoot is not yet a cooldown: %+v", r.Skipped)
	}
	h.RecordOutcome(op, 880, o)
	r = mustPlan(t, pressureDoc(10000), o, h)
	if s, _ := skipOf(r, "test-run"); s.Reason != SkipCooldown {
		t.Errorf("after two overshoots: %+v", s)
	}
	for it := 4; it <= 6; it++ {
		h.StartIteration(it)
		r = mustPlan(t, pressureDoc(10000), o, h)
		if s, _ := skipOf(r, "test-run"); s.Reason != SkipCooldown {
			t.Errorf("iteration %d: cooldown of %d iterations over early: %+v", it, o.CooldownIterations, s)
		}
	}
	h.StartIteration(7)
	r = mustPlan(t, pressureDoc(10000), o, h)
	if _, ok := opOn(r, "test-run"); !ok {
		t.Errorf("iteration 7: cooldown should be over: %+v", r.Skipped)
	}
}

func TestPlanNoGain(t *testing.T) {
	doc := newDoc(1000, 10, "fix").
		tool("small", 2, "run", runArgs("true"), 10, 60, "exit code 0").
		tool("big", 3, "run", runArgs("make"), 10, 600, strings.Repeat("cc -o x\n", 80)).
		build()
	r := mustPlan(t, doc, opts(halfTarget), History{CooldownUntil: noMerge})
	if s, ok := skipOf(r, "small"); !ok || s.Reason != SkipNoGain {
		t.Errorf("small: %+v (listed %v), want no_gain: 60 tokens at 0.25 saves 45 < 50", s, ok)
	}
	if _, ok := opOn(r, "big"); !ok {
		t.Errorf("big not planned: %+v", r)
	}
	// The threshold is a knob.
	r = mustPlan(t, doc, opts(func(o *Options) { halfTarget(o); o.MinGainTokens = 10 }), History{CooldownUntil: noMerge})
	if s, ok := skipOf(r, "small"); ok && s.Reason == SkipNoGain {
		t.Errorf("small skipped with MinGainTokens 10: %+v", s)
	}
}

func TestPlanCachedOpCostsNoCall(t *testing.T) {
	// Critical (7650 of 8400), so that the plan goes ahead whatever the
	// budget leaves of it; merges cooled down, for the single rewrite.
	doc := pressureDoc(8400)
	o := opts(halfTarget)
	first := mustPlan(t, doc, o, History{CooldownUntil: noMerge})
	op, ok := opOn(first, "test-run")
	if !ok || op.CacheKey == "" || !op.LLMCall {
		t.Fatalf("test-run: %+v", op)
	}
	// No budget left this iteration, but the result is cached.
	h := History{CallsThisIteration: 4, Cached: map[string]bool{op.CacheKey: true}, CooldownUntil: noMerge}
	r := mustPlan(t, doc, o, h)
	got, ok := opOn(r, "test-run")
	if !ok || got.LLMCall || !got.Cached || got.CacheKey != op.CacheKey {
		t.Errorf("cached op: %+v (planned %v)", got, ok)
	}
	if s, ok := skipOf(r, "vet-run"); !ok || s.Reason != SkipBudgetExhausted {
		t.Errorf("vet-run is not cached and must wait for budget: %+v", s)
	}
	if r.LLMCalls != 0 {
		t.Errorf("llm_calls %d, want 0", r.LLMCalls)
	}
	// The key is the documented one: payload, target, label, model, prompt.
	payload, err := OpPayload(op, ExpandCalls(doc.Units))
	if err != nil {
		t.Fatal(err)
	}
	if k := CacheKey(payload, op.OutputTokens, op.Label, o.Model, o.PromptVersion); k != op.CacheKey {
		t.Errorf("CacheKey(OpPayload(op)) = %s, op says %s", k, op.CacheKey)
	}
	// Another model or prompt version is another key.
	r = mustPlan(t, doc, opts(func(o *Options) { halfTarget(o); o.Model = "other" }), h)
	if got, _ := opOn(r, "test-run"); got.Cached {
		t.Errorf("a result of another model counted as cached")
	}
}

func TestPlanModes(t *testing.T) {
	doc := loadDoc(t, "testdata/release_notes.json")
	t.Run("legacy: one summary of everything but system, task and the last turn", func(t *testing.T) {
		r := mustPlan(t, doc, opts(func(o *Options) { o.Mode = ModeLegacy }), History{})
		if len(r.Ops) != 1 || r.Ops[0].Op != OpCheckpointMerge {
			t.Fatalf("ops %+v", r.Ops)
		}
		merged := r.Ops[0].Units
		for _, id := range []string{"checkpoint-T3", "critique-52", "tool-44-0", "assistant-49#call_49a", "tool-53-0"} {
			if !slices.Contains(merged, id) {
				t.Errorf("legacy merge leaves out %s", id)
			}
		}
		for _, id := range []string{"system-T3", "task-T3", "assistant-54", "assistant-54#call_54a", "tool-54-0"} {
			if slices.Contains(merged, id) {
				t.Errorf("legacy merge takes %s", id)
			}
		}
		if r.Ops[0].Checkpoint != "" || len(r.Skipped) != 0 {
			t.Errorf("legacy re-merges the old summary into a new one, skips nothing: %+v", r)
		}
	})
	t.Run("tiered: lanes, no budget, no realised ratios, no advisor", func(t *testing.T) {
		h := History{Ratios: map[string][]float64{"compact_tool_output:run": {0.95}}, CallsThisIteration: 4}
		r := mustPlan(t, doc, opts(func(o *Options) { o.Mode = ModeTiered; o.Advisor = true }), h)
		if op, ok := opOn(r, "tool-47-0"); !ok || op.OutputTokens != 106 {
			t.Errorf("tiered used realised ratios or the budget: %+v", op)
		}
		if len(r.NearTies) != 0 || r.Advisor.Status != AdvisorOff {
			t.Errorf("tiered consulted the advisor: %+v", r.Advisor)
		}
		if s, ok := skipOf(r, "critique-52"); !ok || s.Reason != SkipProtectedLane {
			t.Errorf("tiered does not protect lanes: %+v", s)
		}
	})
	t.Run("tiered_adaptive: realised ratios and budget apply", func(t *testing.T) {
		h := History{Ratios: map[string][]float64{"compact_tool_output:run": {0.95}}, CooldownUntil: noMerge}
		r := mustPlan(t, doc, DefaultOptions(), h)
		if s, ok := skipOf(r, "tool-47-0"); !ok || s.Reason != SkipUnachievableRatio {
			t.Errorf("tool-47-0: %+v", s)
		}
	})
}

func TestPlanCheckpointMergeIsIncremental(t *testing.T) {
	// Ten short messages: each too small to compact on its own, together
	// worth merging. 950 tokens of 1050: critical, where a merge short of
	// the target is still made.
	b := newDoc(1050, 12, "fix").add(unitSummary("checkpoint-1", 1, 300))
	var stale []string
	for k := 2; k < 12; k++ {
		id := fmt.Sprintf("assistant-%d", k)
		stale = append(stale, id)
		b.msg(id, "assistant", k-1, 40, "Step "+id+" looked at the build.")
	}
	doc := b.msg("assistant-12", "assistant", 12, 50, "now").build()
	r := mustPlan(t, doc, DefaultOptions(), History{})
	var merge *Op
	for k := range r.Ops {
		if r.Ops[k].Op == OpCheckpointMerge {
			merge = &r.Ops[k]
		}
	}
	if merge == nil {
		t.Fatalf("no merge: %+v", r.Ops)
	}
	if merge.Checkpoint != "checkpoint-1" {
		t.Errorf("merge into %q, want the running checkpoint", merge.Checkpoint)
	}
	if slices.Contains(merge.Units, "checkpoint-1") || slices.Contains(merge.Units, "assistant-12") {
		t.Errorf("merge takes %v: never the checkpoint itself nor recent units", merge.Units)
	}
	if !slices.Equal(merge.Units, stale) {
		t.Errorf("merge takes %v, want the newly stale %v", merge.Units, stale)
	}
	if _, ok := opOn(r, "checkpoint-1"); ok {
		t.Errorf("the checkpoint is compacted wholesale: %+v", r.Ops)
	}
}

func TestPlanRecentTurnsStayRaw(t *testing.T) {
	// 3020 tokens of 3300: critical, and the target 1155 needs both
	// outputs compacted.
	doc := newDoc(3300, 10, "fix").
		tool("old", 5, "run", runArgs("make"), 10, 1400, "log").
		tool("new", 9, "run", runArgs("make"), 10, 1400, "log").
		build()
	r := mustPlan(t, doc, DefaultOptions(), History{})
	if _, ok := opOn(r, "new"); ok {
		t.Errorf("a unit of the last 2 turns was compacted")
	}
	if _, ok := opOn(r, "old"); !ok {
		t.Errorf("old not compacted: %+v", r)
	}
	r = mustPlan(t, doc, opts(func(o *Options) { o.RecentTurns = 0 }), History{})
	if _, ok := opOn(r, "new"); !ok {
		t.Errorf("RecentTurns 0 still protects the last turns: %+v", r.Ops)
	}
}

func TestPlanRejectsInvalidOptions(t *testing.T) {
	_, err := Plan(pressureDoc(10000), Options{}, History{})
	if err == nil || !strings.Contains(err.Error(), "Mode") {
		t.Errorf("zero Options: %v", err)
	}
}

// noMerge cools checkpoint merges down, for tests about single-unit ops
// that a merge would otherwise take over.
var noMerge = map[string]int{"checkpoint_merge": 99}

func setTokens(doc Document, id string, n int) {
	for i := range doc.Units {
		if doc.Units[i].ID == id {
			doc.Units[i].Tokens = n
		}
	}
}

func TestPlanDraftingProtectsSourceEvidence(t *testing.T) {
	// 4080 tokens of 5500: pressure, target 1925. The source's pointer
	// and the trace reach it; the trace alone does not.
	doc := newDoc(5500, 10, "fix the loader").
		tool("src", 2, "read_file", pathArgs("config/load.go"), 10, 2000, "package config\nfunc Load() {}").
		tool("w", 3, "write_file", writeArgs("notes.md", "Loader notes: see config/load.go for the defaults."), 300, 10, "wrote").
		tool("trace", 4, "run", runArgs("go test ./..."), 10, 1500, "ok").
		msg("assistant-10", "assistant", 10, 50, "Next.").
		build()
	if DetectPhase(doc) != PhaseExploring {
		t.Fatalf("phase %s", DetectPhase(doc))
	}
	if Classify(doc)["src"] != LaneSourceEvidence {
		t.Fatalf("src is not source evidence: %v", Classify(doc))
	}
	r := mustPlan(t, doc, DefaultOptions(), History{})
	if op, ok := opOn(r, "src"); !ok || op.Op != OpReplaceWithPointer || op.Pointer != "file:config/load.go" || !r.TargetMet {
		t.Errorf("exploring: source evidence is fair game at pressure, got %+v", r.Ops)
	}
	for _, phase := range []Phase{PhaseDrafting, PhaseFinalizing} {
		doc.Task.Phase = phase
		r = mustPlan(t, doc, DefaultOptions(), History{})
		if r.Phase != phase {
			t.Errorf("plan phase %s", r.Phase)
		}
		if s, ok := skipOf(r, "src"); !ok || s.Reason != SkipProtectedLane {
			t.Errorf("%s: source evidence %+v, want protected_lane", phase, s)
		}
		// Without the source the trace cannot reach the target, and one
		// more step like the source's read would not fit: the trace is
		// compacted now, short of the target.
		if opIndex(r, "trace") < 0 || r.TargetMet {
			t.Errorf("%s: ops %+v: want the trace compacted", phase, r.Ops)
		}
		// At the critical tier the trace goes first, then the source's
		// pointer; the draft stays raw.
		crit := doc
		crit.LimitTokens = 4400
		r = mustPlan(t, crit, DefaultOptions(), History{})
		trace, src := opIndex(r, "trace"), opIndex(r, "src")
		if r.Tier != TierCritical || trace < 0 || src < trace || r.Ops[src].Op != OpReplaceWithPointer || opIndex(r, "c-w") >= 0 {
			t.Errorf("%s, critical: ops %+v: want the trace, then the source's pointer, the draft raw", phase, r.Ops)
		}
	}
}

func TestPlanMergesWholeBundles(t *testing.T) {
	// 1065 tokens of 1500, target 750. With a high no-gain floor only a
	// merge saves enough.
	doc := newDoc(1500, 10, "write the notes").build()
	doc.Units = append(doc.Units,
		units.Unit{ID: "assistant-2", Role: "assistant", Kind: units.KindMessage, Content: strings.Repeat("Reading and writing. ", 30), Turn: 2, Tokens: 400,
			Calls: []units.Call{{ID: "r1", Name: "run", Args: runArgs("make")}, {ID: "w1", Name: "write_file", Args: writeArgs("notes.md", "x")}}},
		units.Unit{ID: "tool-2-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "r1", Content: "ok", Turn: 2, Tokens: 30},
		units.Unit{ID: "tool-2-1", Role: "tool", Kind: units.KindToolResult, Tool: "write_file", CallID: "w1", Content: "wrote", Turn: 2, Tokens: 5},
		units.Unit{ID: "assistant-3", Role: "assistant", Kind: units.KindMessage, Content: strings.Repeat("Running it. ", 40), Turn: 3, Tokens: 400,
			Calls: []units.Call{{ID: "r2", Name: "run", Args: runArgs("make test")}}},
		units.Unit{ID: "tool-3-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "r2", Content: "ok", Turn: 3, Tokens: 30},
	)
	r := mustPlan(t, doc, opts(func(o *Options) { halfTarget(o); o.MinGainTokens, o.CheckpointOverhead = 300, 0 }), History{})
	var merged []string
	for _, op := range r.Ops {
		if op.Op == OpCheckpointMerge {
			merged = append(merged, op.Units...)
		}
	}
	if !slices.Equal(merged, []string{"assistant-3", "assistant-3#r2", "tool-3-0"}) {
		t.Errorf("merged %v: want assistant-3 with its call and result, and nothing of assistant-2, whose write is active", merged)
	}
	if op, ok := opOn(r, "assistant-2"); ok && op.Op == OpCheckpointMerge {
		t.Errorf("assistant-2 merged away from its write call: %+v", op)
	}
}

func TestPlanDoesNotRecompact(t *testing.T) {
	o := opts(func(o *Options) { o.MinGainTokens = 50 })
	r := mustPlan(t, pressureDoc(10000), o, History{})
	if op, ok := opOn(r, "test-run"); !ok || !op.LLMCall {
		t.Fatalf("fixture: want an LLM op on test-run, got %+v", r.Ops)
	}
	// The same unit once compacted (its content now a rewrite or a
	// pointer's digest) is not rewritten by the model again; a pointer,
	// which loses nothing, still may be.
	r = mustPlan(t, pressureDoc(10000), o, History{Compressed: map[string]int{"test-run": 1}})
	if op, ok := opOn(r, "test-run"); ok && op.LLMCall && op.Op != OpCheckpointMerge {
		t.Fatalf("re-compaction planned: %+v", op)
	}
}

func TestPlanCountsTheCheckpointFrame(t *testing.T) {
	// A merge of a few small stale units would grow the context once the
	// checkpoint's frame is counted: it is not planned.
	doc := newDoc(1000, 12, "write the notes").build()
	for i := 2; i <= 4; i++ {
		doc.Units = append(doc.Units, units.Unit{ID: fmt.Sprintf("assistant-%d", i), Role: "assistant", Kind: units.KindMessage,
			Content: "Looked around.", Turn: i, Tokens: 40})
	}
	doc.Units = append(doc.Units, units.Unit{ID: "assistant-11", Role: "assistant", Kind: units.KindMessage,
		Content: strings.Repeat("Thinking hard about this. ", 60), Turn: 11, Tokens: 700})
	withFrame := mustPlan(t, doc, opts(func(o *Options) { o.MinGainTokens = 1 }), History{})
	for _, op := range withFrame.Ops {
		if op.Op == OpCheckpointMerge {
			t.Fatalf("merge of %d tokens planned: %+v", op.Tokens, op)
		}
	}
	noFrame := mustPlan(t, doc, opts(func(o *Options) { o.MinGainTokens, o.CheckpointOverhead = 1, 0 }), History{})
	if !slices.ContainsFunc(noFrame.Ops, func(op Op) bool { return op.Op == OpCheckpointMerge }) {
		t.Fatalf("fixture: without the frame a merge is planned; ops %+v", noFrame.Ops)
	}
}

func TestPlanDropsFutileCallsAtCritical(t *testing.T) {
	// A trace kept as an artifact (its pointer is free), four stale
	// messages only a merge can take (one call), and the draft being
	// written. 14570 tokens of 16000: critical, target 5600.
	build := func(draftTurn int) Document {
		b := newDoc(16000, 10, "write the report").
			tool("log", 2, "run", runArgs("make all"), 10, 5000, "log")
		for k := 3; k <= 6; k++ {
			b.msg(fmt.Sprintf("assistant-%d", k), "assistant", k, 150, strings.Repeat("Thinking about the report. ", 20))
		}
		doc := b.tool("draft", draftTurn, "write_file", writeArgs("report.md", "draft"), 3000, 10, "wrote 1 file").
			tool("recent", 10, "run", runArgs("make test"), 10, 6000, "test log").
			build()
		doc.Units[3].Artifact = "art-log"
		return doc
	}
	t.Run("calls that cover a sliver of the way are dropped", func(t *testing.T) {
		// The draft is recent: nothing protected can give way, and the
		// log's pointer alone brings the context under pressure.
		r := mustPlan(t, build(10), DefaultOptions(), History{})
		if r.Tier != TierCritical || r.TargetMet || r.LLMCalls != 0 {
			t.Fatalf("tier %s, met %v, calls %d: %+v", r.Tier, r.TargetMet, r.LLMCalls, r.Ops)
		}
		if op, ok := opOn(r, "log"); !ok || op.Op != OpReplaceWithPointer {
			t.Errorf("the free pointer is kept: %+v", r.Ops)
		}
		if s, _ := skipOf(r, "assistant-3"); s.Reason != SkipUnachievableRatio || s.Op != OpCheckpointMerge {
			t.Errorf("assistant-3: skip %+v, want the merge refused as unachievable_ratio", s)
		}
		// The same call is worth making when it covers enough of the way.
		o := DefaultOptions()
		o.MinTargetShare = 0.01
		if r := mustPlan(t, build(10), o, History{}); r.LLMCalls != 1 {
			t.Errorf("with a lower share: %d calls, want 1 (%+v)", r.LLMCalls, r.Ops)
		}
	})
	t.Run("never while the plan touches a protected unit", func(t *testing.T) {
		// The draft is older: the plan points at it, so the merge of the
		// stale messages stays in it.
		r := mustPlan(t, build(5), DefaultOptions(), History{})
		if opIndex(r, "c-draft") < 0 {
			t.Fatalf("fixture: the draft is not touched: %+v", r.Ops)
		}
		if m := opIndex(r, "assistant-3"); m < 0 || r.Ops[m].Op != OpCheckpointMerge || m > opIndex(r, "c-draft") {
			t.Errorf("ops %+v: want the merge of the stale messages, before the draft", r.Ops)
		}
	})
}

// TestOpKinds: the list executors are checked against covers every op the
// planner weighs and every op it planned in these tests' golden documents.
func TestOpKinds(t *testing.T) {
	kinds := OpKinds()
	if want := []OpKind{OpReplaceWithPointer, OpCompactToolArgs, OpCompactToolOutput, OpCompactHistorical, OpCheckpointMerge}; !slices.Equal(kinds, want) {
		t.Fatalf("OpKinds() = %v, want %v", kinds, want)
	}
	if slices.Contains(kinds, OpKeepRaw) {
		t.Error("keep_raw is never planned")
	}
	for op := range opHarm {
		if !slices.Contains(kinds, op) {
			t.Errorf("the planner weighs %s but OpKinds does not list it", op)
		}
	}
	for _, name := range []string{"release_notes.json", "release_notes_critical.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := DecodeDocument(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []Mode{ModeLegacy, ModeTiered, ModeTieredAdaptive} {
			for _, op := range mustPlan(t, doc, opts(func(o *Options) { o.Mode = mode }), History{}).Ops {
				if !slices.Contains(kinds, op.Op) {
					t.Errorf("%s, %s: planned %s, which OpKinds does not list", name, mode, op.Op)
				}
			}
		}
	}
}
