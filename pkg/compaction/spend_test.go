package compaction

import (
	"fmt"
	"strings"
	"testing"
)

// spendDoc is a drafting task: an old draft d1.md, a run's output, three
// stale messages, a source the latest draft cites, and the latest draft,
// notes.md. 8690 tokens. The old draft is large and old, so by harm per
// token alone a pointer to it would come before the source's.
func spendDoc(limit int) Document {
	b := newDoc(limit, 10, "write the notes").
		tool("d1", 1, "write_file", writeArgs("d1.md", "The first part."), 3000, 10, "wrote").
		tool("log", 2, "run", runArgs("make all"), 10, 3000, strings.Repeat("cc -c x.c\n", 300))
	for k := 3; k <= 5; k++ {
		b.msg(fmt.Sprintf("assistant-%d", k), "assistant", k, 100, "Looking at the build once more.")
	}
	return b.tool("src", 7, "read_file", pathArgs("src/a.go"), 10, 600, "package a\nfunc A() {}").
		tool("d2", 8, "write_file", writeArgs("notes.md", "The notes: see src/a.go."), 1500, 10, "wrote").
		msg("assistant-10", "assistant", 10, 50, "Next.").
		build()
}

// TestPlanSpendOrder: under pressure the protected lanes stay raw while the
// traces and stale chat reach the target (and nothing is done while they
// cannot); at the critical tier the plan spends on traces and stale chat,
// then on pointers to the sources, then on the older draft, and on the
// latest draft last.
func TestPlanSpendOrder(t *testing.T) {
	tests := []struct {
		name    string
		limit   int
		target  float64
		mode    Mode
		touched []string // in plan order; every other of log, src, d1, d2 stays raw
	}{
		{"pressure: traces and chat reach the target", 12000, 0.60, ModeTieredAdaptive, []string{"log"}},
		{"pressure: they do not, so nothing is done", 12000, 0.35, ModeTieredAdaptive, nil},
		{"critical: traces and chat reach the target", 9600, 0.65, ModeTieredAdaptive, []string{"log"}},
		{"critical: then the source's pointer", 9600, 0.60, ModeTieredAdaptive, []string{"log", "src"}},
		{"critical: then the older draft", 9600, 0.35, ModeTieredAdaptive, []string{"log", "src", "c-d1"}},
		{"critical: the latest draft last", 9600, 0.15, ModeTieredAdaptive, []string{"log", "src", "c-d1", "c-d2"}},
		{"tiered spends in the same order", 9600, 0.60, ModeTiered, []string{"log", "src"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustPlan(t, spendDoc(tt.limit), opts(func(o *Options) { o.Mode, o.TargetRatio = tt.mode, tt.target }), History{})
			if r.Phase != PhaseDrafting || Classify(spendDoc(tt.limit))["src"] != LaneSourceEvidence {
				t.Fatalf("fixture: phase %s, lanes %v", r.Phase, r.Lanes)
			}
			last := -1
			for _, id := range tt.touched {
				k := opIndex(r, id)
				if k < last {
					t.Fatalf("ops %v: want %v touched in that order", opUnits(r), tt.touched)
				}
				last = k
			}
			for _, id := range []string{"log", "src", "c-d1", "c-d2"} {
				k := opIndex(r, id)
				want := strings.Contains(" "+strings.Join(tt.touched, " ")+" ", " "+id+" ")
				if (k >= 0) != want {
					t.Errorf("%s touched: %v, want %v (ops %v)", id, k >= 0, want, opUnits(r))
				}
			}
			if k := opIndex(r, "src"); k >= 0 && r.Ops[k].Op != OpReplaceWithPointer {
				t.Errorf("the source is spent as a pointer, got %s", r.Ops[k].Op)
			}
			if len(tt.touched) > 0 && !r.TargetMet && tt.target > 0.15 {
				t.Errorf("target %d not met: %d", r.TargetTokens, r.TokensAfter)
			}
		})
	}
}

// budgetDoc: three old run outputs only compactor calls can shrink, an
// older draft and the latest one (pointers to both are free). 7400 tokens
// of 8000: critical.
func budgetDoc() Document {
	b := newDoc(8000, 10, "write the notes")
	for k := 2; k <= 4; k++ {
		b.tool(fmt.Sprintf("log%d", k), k, "run", runArgs(fmt.Sprintf("make step%d", k)), 10, 1200, strings.Repeat("cc -c x.c\n", 100))
	}
	return b.tool("d1", 5, "write_file", writeArgs("d1.md", "The first part."), 2000, 10, "wrote").
		tool("d2", 6, "write_file", writeArgs("notes.md", "The notes."), 1500, 10, "wrote").
		msg("assistant-10", "assistant", 10, 50, "Next.").
		build()
}

// TestPlanShortCallBudgetMerges: with one call left the planner merges the
// run of old traces into the checkpoint (one call) rather than rewrite one
// of them and fall back to pointers on the drafts; a draft is touched only
// when the merge is not enough, the latest draft last of all.
func TestPlanShortCallBudgetMerges(t *testing.T) {
	tests := []struct {
		name    string
		target  float64
		hist    History
		touched []string
	}{
		{"one call: the merge, the drafts raw", 0.60, History{}, []string{"c-log2"}},
		{"one call, a deeper target: the merge, then the older draft", 0.35, History{}, []string{"c-log2", "c-d1"}},
		{"no call left: pointers, the latest draft last", 0.35, History{CallsThisIteration: 1}, []string{"c-d1", "c-d2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts(func(o *Options) { o.MaxCallsPerIteration, o.TargetRatio = 1, tt.target })
			r := mustPlan(t, budgetDoc(), o, tt.hist)
			if r.Tier != TierCritical {
				t.Fatalf("tier %s", r.Tier)
			}
			if got := opUnits(r); strings.Join(got, " ") != strings.Join(tt.touched, " ") {
				t.Fatalf("ops on %v, want %v", got, tt.touched)
			}
			if k := opIndex(r, "log2"); k >= 0 {
				merge := r.Ops[k]
				if merge.Op != OpCheckpointMerge || strings.Join(merge.Units, " ") != "c-log2 log2 c-log3 log3 c-log4 log4" || !merge.LLMCall {
					t.Errorf("want one merge of the three runs, got %+v", merge)
				}
			}
			if r.LLMCalls > o.MaxCallsPerIteration-tt.hist.CallsThisIteration {
				t.Errorf("%d calls planned over the budget", r.LLMCalls)
			}
		})
	}
}
