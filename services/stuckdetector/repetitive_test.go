package stuckdetector

import (
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestRepetitiveOutput(t *testing.T) {
	const src = "package config\n"
	const again = "Let me look at the config loader again."
	// 24 words with the last: changing only the last keeps 21 of 23 shingles
	// (0.91). It is also longer than a diagnosis quotes.
	const long = "The failing assertion compares the parsed timeout with the default so I will check how " +
		"the loader applies defaults before it validates the"
	runTrajectories(t, RepetitiveOutput{}, []trajectory{
		// Firing.
		{
			name: "same text and same read",
			records: []events.IterationRecord{
				rec(4, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
				rec(5, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
				rec(6, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
			},
			want:     []int{6},
			wantDiag: `the same assistant text 3 times in iterations 4-6 ("Let me look at the config loader again.") with the same tool calls and results: read_file {"path":"pkg/config/load.go"}; evidence weak (3 identical responses, threshold 3): a nudge first, prune_context if it goes on`,
			wantEvid: []int{4, 5, 6},
		},
		{
			name: "a fourth identical response is strong evidence: prune",
			records: []events.IterationRecord{
				rec(4, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
				rec(5, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
				rec(6, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
				rec(7, "T1", text(again), calls(readFile("pkg/config/load.go", src))),
			},
			want:         []int{6, 7},
			wantStrength: []events.Strength{events.StrengthWeak, events.StrengthStrong},
		},
		{
			name: "same text and no tool calls",
			records: []events.IterationRecord{
				rec(1, "T1", text("The task is complete."), claimedDone()),
				rec(2, "T1", text("The task is complete."), claimedDone()),
				rec(3, "T1", text("The task is complete."), claimedDone()),
			},
			want:     []int{3},
			wantDiag: `the same assistant text 3 times in iterations 1-3 ("The task is complete.") with no tool calls; evidence weak (3 identical responses, threshold 3): a nudge first, prune_context if it goes on`,
		},
		{
			name: "case, whitespace, punctuation and numbers are normalized",
			records: []events.IterationRecord{
				rec(1, "T1", text("Attempt 3: running the tests again."), calls(goTest("FAIL", 1))),
				rec(2, "T1", text("attempt 4 -  Running the tests  again"), calls(goTest("FAIL", 1))),
				rec(3, "T1", text("ATTEMPT 15:\nrunning the tests again!"), calls(goTest("FAIL", 1))),
			},
			want: []int{3},
		},
		{
			name: "near-identical long text",
			records: []events.IterationRecord{
				rec(1, "T1", text(long+" input")),
				rec(2, "T1", text(long+" value")),
				rec(3, "T1", text(long+" field")),
			},
			want:     []int{3},
			wantDiag: `near-identical (similarity 0.91) assistant text 3 times in iterations 1-3 ("` + long[:100] + `...") with no tool calls; evidence weak (3 identical responses, threshold 3): a nudge first, prune_context if it goes on`,
		},
		{
			name: "parallel calls in another order are the same calls",
			records: []events.IterationRecord{
				rec(1, "T1", text(again), calls(readFile("a.go", "A"), readFile("b.go", "B"))),
				rec(2, "T1", text(again), calls(readFile("b.go", "B"), readFile("a.go", "A"))),
				rec(3, "T1", text(again), calls(readFile("a.go", "A"), readFile("b.go", "B"))),
			},
			want: []int{3},
		},
		// Healthy look-alikes.
		{
			name: "same text over edits to different files",
			records: []events.IterationRecord{
				rec(1, "T1", text("Editing file"), files("a.go"), calls(editFile("a.go", "log", "logger"))),
				rec(2, "T1", text("Editing file"), files("b.go"), calls(editFile("b.go", "log", "logger"))),
				rec(3, "T1", text("Editing file"), files("c.go"), calls(editFile("c.go", "log", "logger"))),
			},
		},
		{
			name: "polling with the same text and changing output",
			records: []events.IterationRecord{
				rec(1, "T1", text("Waiting for the rollout."), calls(call("bash", `{"cmd":"kubectl rollout status"}`, "1 of 3"))),
				rec(2, "T1", text("Waiting for the rollout."), calls(call("bash", `{"cmd":"kubectl rollout status"}`, "2 of 3"))),
				rec(3, "T1", text("Waiting for the rollout."), calls(call("bash", `{"cmd":"kubectl rollout status"}`, "3 of 3"))),
			},
		},
		{
			name: "tests re-run after edits with the same words",
			records: []events.IterationRecord{
				rec(1, "T1", text("Fixing and re-running the tests."), files("a.go"), calls(editFile("a.go", "a", "b"), goTest("FAIL", 1))),
				rec(2, "T1", text("Fixing and re-running the tests."), files("a.go"), calls(editFile("a.go", "b", "c"), goTest("FAIL", 1))),
				rec(3, "T1", text("Fixing and re-running the tests."), files("a.go"), calls(editFile("a.go", "c", "d"), goTest("FAIL", 1))),
			},
		},
		{
			name: "different texts with the same call",
			records: []events.IterationRecord{
				rec(1, "T1", text("Let me check the tests."), calls(goTest("FAIL", 1))),
				rec(2, "T1", text("Let me check the config."), calls(goTest("FAIL", 1))),
				rec(3, "T1", text("Let me check the tests."), calls(goTest("FAIL", 1))),
			},
		},
		{
			name: "an empty text breaks the run",
			records: []events.IterationRecord{
				rec(1, "T1", text(again), calls(readFile("a.go", src))),
				rec(2, "T1", calls(readFile("a.go", src))),
				rec(3, "T1", text(again), calls(readFile("a.go", src))),
			},
		},
		{
			name: "productive work with a stock phrase",
			records: []events.IterationRecord{
				rec(1, "T1", text("Implementing the next function."), files("a.go"), calls(call("write_file", `{"path":"a.go","content":"1"}`, "ok"))),
				rec(2, "T1", text("Implementing the next function."), files("b.go"), calls(call("write_file", `{"path":"b.go","content":"2"}`, "ok"))),
				rec(3, "T1", text("Implementing the next function."), files("c.go"), calls(call("write_file", `{"path":"c.go","content":"3"}`, "ok"))),
			},
		},
		{
			name: "task switch resets",
			records: []events.IterationRecord{
				rec(1, "T1", text(again)),
				rec(2, "T1", text(again)),
				rec(3, "T2", text(again)),
				rec(4, "T2", text(again)),
			},
		},
	})
}
