package compaction_test

import (
	"encoding/json"
	"fmt"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/units"
)

// buildLog is a task that ran the build three times long ago and once
// recently, with explicit token counts so the figures below are exact.
// With artifacts, the builder kept each log whole as an artifact, so a
// pointer can replace it.
func buildLog(artifacts bool) compaction.Document {
	us := []units.Unit{
		{ID: "system", Role: "system", Kind: units.KindMessage, Content: "You are the Builder.", Tokens: 100},
		{ID: "task", Role: "user", Kind: units.KindMessage, Content: "Task T1: fix the failing build", Tokens: 100},
	}
	for _, run := range []struct {
		id   string
		turn int
	}{{"a", 3}, {"b", 3}, {"c", 3}, {"d", 7}} {
		args := json.RawMessage(fmt.Sprintf(`{"command":"make %s"}`, run.id))
		us = append(us,
			units.Unit{ID: "call-" + run.id, Role: "assistant", Kind: units.KindToolCall, Tool: "run", CallID: run.id, Args: args, Turn: run.turn, Tokens: 20},
			units.Unit{ID: "log-" + run.id, Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: run.id, Args: args, Turn: run.turn, Tokens: 1000,
				Content: "exit code 0\nbuild log of " + run.id})
		if artifacts {
			us[len(us)-1].Artifact = "art-" + run.id
		}
	}
	us = append(us, units.Unit{ID: "assistant-10", Role: "assistant", Kind: units.KindMessage, Turn: 10, Tokens: 50, Content: "Next."})
	return compaction.Document{LimitTokens: 6000, CurrentTurn: 10, Task: compaction.Task{Goal: "fix the failing build"}, Units: us}
}

// Plan is a pure function of the document, the options and the task's
// history: it says which units to compact, in which order, and why the
// others stay raw. Here the oldest run of stale units goes into the
// checkpoint in one compactor call, deep enough for the target.
func ExamplePlan() {
	plan, err := compaction.Plan(buildLog(false), compaction.DefaultOptions(), compaction.History{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d tokens of %d, target %d\n", plan.Tier, plan.TokensBefore, plan.LimitTokens, plan.TargetTokens)
	for _, op := range plan.Ops {
		fmt.Printf("%s %s saves %d\n", op.Op, op.Unit, op.TokensSaved)
	}
	fmt.Printf("after %d, target met %v, %d compactor calls\n", plan.TokensAfter, plan.TargetMet, plan.LLMCalls)
	// Output:
	// pressure: 4330 tokens of 6000, target 2100
	// checkpoint_merge call-a saves 3144
	// after 1186, target met true, 1 compactor calls
}

// With Options.Advisor set, Plan does not call anyone: it returns the near
// ties as a question. The caller asks the advisor (the summarizer model)
// and ApplyAdvice folds the answer in, within the planner's guard rails.
// Here the three old logs are artifacts, and the pointers to them tie.
func ExampleApplyAdvice() {
	doc, opts, hist := buildLog(true), compaction.DefaultOptions(), compaction.History{}
	opts.Advisor = true
	// A shallower target than the default: two of the three logs are
	// enough, and which two is the advisor's call.
	opts.TargetRatio = 0.5
	plan, err := compaction.Plan(doc, opts, hist)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(plan.Advisor.Status)
	for _, c := range plan.NearTies {
		fmt.Printf("tied: %s (%s, saves %d)\n", c.ID, c.Op, c.TokensSaved)
	}

	answer := []byte(`[{"candidate_id": "log-c", "priority": 1, "rationale_tag": "oldest_output"}]`)
	advised := compaction.ApplyAdvice(doc, opts, hist, plan, answer)
	fmt.Println(advised.Advisor.Status, advised.Advisor.Order)
	for _, op := range advised.Ops {
		fmt.Println(op.Op, op.Unit)
	}

	// An answer that names a unit the planner did not offer changes nothing.
	refused := compaction.ApplyAdvice(doc, opts, hist, plan, []byte(`[{"candidate_id": "task", "priority": 1, "rationale_tag": "x"}]`))
	fmt.Println(refused.Advisor.Status, refused.Advisor.Reason)
	// Output:
	// pending
	// tied: log-a (replace_with_pointer, saves 940)
	// tied: log-b (replace_with_pointer, saves 940)
	// tied: log-c (replace_with_pointer, saves 940)
	// used [log-c log-a log-b]
	// replace_with_pointer log-c
	// replace_with_pointer log-a
	// ignored invalid: ranking[0]: field candidate_id: "task" is not a candidate
}

// An executor must know every op a plan can hold.
func ExampleOpKinds() {
	fmt.Println(compaction.OpKinds())
	// Output:
	// [replace_with_pointer compact_tool_args compact_tool_output compact_historical checkpoint_merge]
}
