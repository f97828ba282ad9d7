package console

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

func TestRender(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	task := prd.Task{ID: "T1", Title: "Greeting", AcceptanceCriteria: []string{"x"}}
	cases := []struct {
		typ     events.Type
		payload any
		want    []string
	}{
		{events.TaskStarted, events.TaskStartedData{Task: task}, []string{"task T1: Greeting"}},
		{events.IterationCompleted, events.IterationRecord{Iteration: 3, TaskID: "T1",
			ToolCalls: []events.ToolCall{
				{Name: "write_file", Args: json.RawMessage(`{"path":"a.txt","content":"hello"}`)},
				{Name: "run", Args: json.RawMessage(`{"command":"false"}`), ExitCode: 1},
				{Name: "read_file", Args: json.RawMessage(`{"path":"../x"}`), Error: "path \"../x\" escapes the workspace\nmore"},
			},
			Usage: events.Usage{InputTokens: 120, OutputTokens: 8}, ContextTokens: 300},
			[]string{"iteration 3 (task T1): 3 tool call(s), tokens in 120 / out 8, context 300",
				"write_file path=a.txt content=<5 bytes> → ok", "run command=false → exit 1", "escapes the workspace …"}},
		{events.IterationAnalyzed, events.IterationAnalyzedData{Iteration: 3, Signal: &events.Signal{
			Pattern: "circular_tools", Confidence: 0.85, Action: events.ActionPrune, Diagnosis: "read a.txt 3 times"}},
			[]string{"stuck: circular_tools (confidence 0.85) → prune_context: read a.txt 3 times"}},
		{events.CritiqueCompleted, events.CritiqueCompletedData{TaskID: "T1", Verdict: events.Verdict{Feedback: "add a header"},
			Verify: &events.VerifyResult{Command: "sh t.sh", ExitCode: 0}},
			[]string{"critic requested changes on T1: add a header (verify `sh t.sh` exit 0)"}},
		{events.SessionFailed, events.SessionFailedData{Reason: "task T1 used all 30 turns"}, []string{"session failed: task T1 used all 30 turns"}},
		{events.SessionEscalated, events.SessionEscalatedData{Reason: "stuck", Tried: []string{"nudge:x", "escalate:x"}},
			[]string{"session escalated: stuck (tried: nudge:x, escalate:x)"}},
		{events.SessionResumed, events.SessionResumedData{Message: "use the v2 API\nand test it"}, []string{"session resumed at task T1 with guidance: use the v2 API …"}},
		{events.PruneCompleted, events.PruneCompletedData{TaskID: "T1", TokensBefore: 900, TokensAfter: 300, RemovedUnits: []string{"a", "b"}, KeptUnits: []string{"c"}},
			[]string{"pruned T1: 900 → 300 tokens, 2 unit(s) removed, 1 kept"}},
		{events.PruneCompleted, events.PruneCompletedData{TaskID: "T1", Error: "context kept changing"}, []string{"pruning T1 failed: context kept changing"}},
		{events.TaskDecomposed, events.TaskDecomposedData{ParentID: "T1", Subtasks: []prd.Task{
			{ID: "T1.1", Title: "first", AcceptanceCriteria: []string{"a"}}, {ID: "T1.2", Title: "second", AcceptanceCriteria: []string{"b"}}}},
			[]string{"T1 split into 2 subtasks:", "· T1.1: first", "· T1.2: second"}},
		{events.TaskDecomposed, events.TaskDecomposedData{ParentID: "T1", Error: "not JSON"}, []string{"T1 could not be decomposed: not JSON"}},
		{events.TaskCompleted, events.TaskCompletedData{TaskID: "T1", Iterations: 3, Attempts: 1,
			Commit: &events.Commit{TaskID: "T1", SHA: "0123456789abcdef", Subject: "T1: Greeting", Pushed: true}},
			[]string{"task T1 done after 3 iterations, 1 review(s): committed 0123456 T1: Greeting (pushed)"}},
		{events.SessionCompleted, events.SessionCompletedData{Tasks: 2, Branch: "ralph/demo", Commits: []events.Commit{
			{TaskID: "T1", SHA: "aaaaaaaaaa", Subject: "T1: one"}, {TaskID: "T2", SHA: "bbbbbbbbbb", Subject: "T2: two", PushError: "rejected\nnon-fast-forward"}}},
			[]string{"2 commit(s) on branch ralph/demo:", "aaaaaaa T1: one", "bbbbbbb T2: two (not pushed: rejected …)"}},
		{events.CancelRequested, events.CancelRequestedData{Reason: "wrong branch\nsorry"}, []string{"cancel asked: wrong branch …"}},
		{events.CancelRequested, events.CancelRequestedData{}, []string{"[s1] ■ cancel asked"}},
		{events.SessionCancelled, events.SessionCancelledData{Reason: "wrong branch", TaskID: "T1", Iterations: 4},
			[]string{"session cancelled at task T1 after 4 iterations: wrong branch"}},
		{events.MemoryUpdated, events.MemoryUpdatedData{TaskID: "T2", How: "llm", Notes: 3, Tokens: 640, MaxTokens: 1500, Tasks: 2, Resummarized: "extractive"},
			[]string{"memory: 3 note(s) from T2 (llm), 640 of 1500 tokens, 2 task(s), summarised again (extractive)"}},
		{events.MemoryUpdated, events.MemoryUpdatedData{TaskID: "T2", Error: "redis: down"}, []string{"memory not updated from T2: redis: down"}},
	}
	for _, c := range cases {
		t.Run(string(c.typ)+" "+c.want[0], func(t *testing.T) {
			env := events.Must(c.typ, "s1", "T1", 1, at, c.payload)
			got := Render(env)
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("render lacks %q:\n%s", w, got)
				}
			}
		})
	}
	// A healthy analysis and an iteration request print nothing.
	for _, env := range []events.Envelope{
		events.Must(events.IterationAnalyzed, "s1", "T1", 1, at, events.IterationAnalyzedData{Iteration: 1}),
		events.Must(events.IterationRequested, "s1", "T1", 1, at, events.IterationRequestedData{Iteration: 1}),
	} {
		if got := Render(env); got != "" {
			t.Errorf("%s rendered %q", env.Type, got)
		}
	}
}
