package stuckdetector_test

import (
	"encoding/json"
	"fmt"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

// reread is an iteration in which the builder reads config.go again and
// nothing in the workspace changes.
func reread(iteration int) events.IterationRecord {
	return events.IterationRecord{
		Iteration: iteration,
		TaskID:    "T1",
		ToolCalls: []events.ToolCall{{
			Name:   "read_file",
			Args:   json.RawMessage(`{"path":"config.go"}`),
			Output: "package config\n",
		}},
		WorkspaceHash: "sha256:9f2c1a7e0b3d55aa",
	}
}

// A Detector sees iterations one by one, as `ralph stuck scan` does: the
// third identical read with nothing changing in between is a loop on weak
// evidence (a nudge), and the window keeps it; the fourth read, the nudge
// having changed nothing, is strong evidence (prune the context), and the
// window is cleared once it has fired.
func ExampleDetector() {
	d := stuckdetector.NewDetector(stuckdetector.DefaultConfig(), nil)
	for it := 1; it <= 5; it++ {
		s := d.Observe(reread(it))
		if s == nil {
			fmt.Printf("iteration %d: no signal\n", it)
			continue
		}
		fmt.Printf("iteration %d: %s (%.2f, %s, %s): %s\n", it, s.Pattern, s.Confidence, s.Strength, s.Action, s.Diagnosis)
	}
	// Output:
	// iteration 1: no signal
	// iteration 2: no signal
	// iteration 3: circular_tools (0.85, weak, nudge): read_file {"path":"config.go"} called 3 times in iterations 1-3 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on
	// iteration 4: circular_tools (0.85, strong, prune_context): read_file {"path":"config.go"} called 4 times in iterations 1-4 with no workspace change; evidence strong (4 identical calls, threshold 3)
	// iteration 5: no signal
}

// Analyze looks at a whole window at once, as the service does with the
// window it keeps in Redis. Only the trailing records of the newest task
// count: T2 starts with a clean slate.
func ExampleAnalyze() {
	window := []events.IterationRecord{reread(1), reread(2), reread(3)}
	s := stuckdetector.Analyze(window, stuckdetector.DefaultConfig(), nil)
	fmt.Println(s.Pattern, s.Evidence)

	next := reread(4)
	next.TaskID = "T2"
	fmt.Println(stuckdetector.Analyze(append(window, next), stuckdetector.DefaultConfig(), nil) == nil)
	// Output:
	// circular_tools [1 2 3]
	// true
}
