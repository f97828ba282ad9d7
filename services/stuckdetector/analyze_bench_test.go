package stuckdetector_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

// BenchmarkAnalyzeIteration is the detector's analysis of one iteration:
// every default pattern over a full window (RALPH_STUCK_WINDOW records of
// one task), which the service runs once per iteration.completed. "working"
// is a builder making progress (no signal, so every pattern looks all the
// way); "looping" is one re-reading a file and failing the same test, which
// a pattern reports.
//
//	go test -run '^$' -bench BenchmarkAnalyzeIteration ./services/stuckdetector/
func BenchmarkAnalyzeIteration(b *testing.B) {
	cfg, patterns := stuckdetector.DefaultConfig(), stuckdetector.DefaultPatterns()
	for _, tc := range []struct {
		name   string
		record func(i int) events.IterationRecord
		signal bool
	}{
		{"working", workingIteration, false},
		{"looping", loopingIteration, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			window := make([]events.IterationRecord, cfg.Window)
			for i := range window {
				window[i] = tc.record(i + 1)
			}
			var s *events.Signal
			b.ReportAllocs()
			for b.Loop() {
				s = stuckdetector.Analyze(window, cfg, patterns)
			}
			if (s != nil) != tc.signal {
				b.Fatalf("signal %+v, want one: %v", s, tc.signal)
			}
		})
	}
}

// workingIteration reads a new file, writes it and runs the tests, which
// fail less each time; the workspace changes every iteration.
func workingIteration(i int) events.IterationRecord {
	path := fmt.Sprintf("pkg/p/file%d.go", i)
	src := strings.Repeat(fmt.Sprintf("func f%d() int { return %d }\n", i, i), 40)
	return events.IterationRecord{
		Iteration: i, TaskID: "T1",
		AssistantText: fmt.Sprintf("Step %d: %s needs the handler for case %d; I write it and run the tests again to see what is left.", i, path, i),
		ToolCalls: []events.ToolCall{
			{Name: "read_file", Args: json.RawMessage(fmt.Sprintf(`{"path":%q}`, path)), Output: src},
			{Name: "write_file", Args: json.RawMessage(fmt.Sprintf(`{"path":%q,"content":%q}`, path, src+"// done\n")), Output: "wrote " + path},
			{Name: "run", Args: json.RawMessage(`{"command":"go test ./..."}`), Output: fmt.Sprintf("--- FAIL: TestCase%d\nFAIL\n", i), ExitCode: 1},
		},
		FilesChanged:  []string{path},
		WorkspaceHash: fmt.Sprintf("sha256:%064x", i),
		Tests:         &events.TestResult{Passed: 10 + i, Failed: 20 - i},
		Usage:         events.Usage{InputTokens: 4000 + 300*i, OutputTokens: 200},
		ContextTokens: 4000 + 300*i,
	}
}

// loopingIteration reads the same file and fails the same test with
// nothing changing.
func loopingIteration(i int) events.IterationRecord {
	r := workingIteration(1)
	r.Iteration = i
	r.ToolCalls = []events.ToolCall{r.ToolCalls[0], r.ToolCalls[2]}
	r.FilesChanged = nil
	return r
}
