package mesh_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// One step reads a 1.3 MB file, the next runs four commands printing 256 KB
// each, the third reads 80 files of 15 KB (each under the inline limit,
// together over the max payload): every event stays under the server's max
// payload, the session completes, and what was too large to carry is kept
// whole as an artifact. Each of these steps used to fail its publish
// ("maximum payload exceeded") until the session was given up on.
func TestLargeOutputsStayUnderTheMaxPayload(t *testing.T) {
	var reads strings.Builder
	files := map[string]string{}
	var big strings.Builder
	for i := 0; big.Len() < 1_300_000; i++ {
		fmt.Fprintf(&big, "%06d the log goes on and on, line after line, as logs do %s\n", i, strings.Repeat("-", i%40))
	}
	files["big.log"] = big.String()
	for i := range 80 {
		name := fmt.Sprintf("part%02d.txt", i)
		files[name] = strings.Repeat(fmt.Sprintf("part %02d: %s\n", i, strings.Repeat("p", 60)), 15000/70)
		fmt.Fprintf(&reads, "{name: read_file, arguments: {path: %s}},", name)
	}
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {turn: 1}, reply: {content: "Reading the log.", tool_calls: [{name: read_file, arguments: {path: big.log}}]}}
  - model: builder
    when: {turn: 2}
    reply:
      content: "Running the four reports."
      tool_calls:
        - {name: run, arguments: {command: "yes report-one | head -c 262144"}}
        - {name: run, arguments: {command: "yes report-two | head -c 262144"}}
        - {name: run, arguments: {command: "yes report-three | head -c 262144"}}
        - {name: run, arguments: {command: "yes report-four | head -c 262144; exit 3"}}
  - {model: builder, when: {turn: 3}, reply: {content: "Reading every part.", tool_calls: [`+reads.String()+`]}}
  - {model: builder, reply: {content: "Done: the log, the reports and the parts are read."}}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "fine", "unmet_criteria": []}'}}
`))
	// The context grows past any window here; this test is about events,
	// not compaction.
	h.cfg.Compaction.Mode = compaction.ModeOff
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")
	h.start(m, "large-outputs", parsePRD(t, "tasks:\n  - {id: L1, title: read everything, acceptance_criteria: [everything is read]}\n"), workspace(t, files))
	got := h.wait(m, "large-outputs")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s; events: %v", last.Type, types(got))
	}

	limit := m.Bus.MaxPayload()
	var replayed int
	if err := m.Bus.Replay(context.Background(), "large-outputs", func(env events.Envelope) error {
		replayed++
		if size := bus.MessageSize(env.ID, env.Marshal()); size > limit {
			t.Errorf("%s is %d bytes, over the max payload of %d", env.ID, size, limit)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if replayed != len(got) {
		t.Fatalf("replayed %d events, followed %d", replayed, len(got))
	}

	recs := eventsOf[events.IterationRecord](t, got, events.IterationCompleted)
	if len(recs) != 4 {
		t.Fatalf("%d iterations, want 4", len(recs))
	}
	// The big file came back one page at a time, saying its size.
	read := recs[0].ToolCalls[0]
	if !strings.Contains(read.Output, fmt.Sprintf("big.log is %d bytes in", big.Len())) || !strings.Contains(read.Output, "read the next page with read_file") {
		t.Errorf("the read of big.log is not a page: %.200s ... %s", read.Output, read.Output[max(0, len(read.Output)-300):])
	}
	// The command outputs travel as pointers to the whole outputs.
	for i, c := range recs[1].ToolCalls {
		if c.Artifact == "" || !strings.HasPrefix(c.Output, "[") {
			t.Errorf("run %d: output of %d bytes carried whole", i, len(c.Output))
			continue
		}
		whole, err := m.Store.GetArtifact(context.Background(), "large-outputs", c.Artifact)
		if err != nil {
			t.Fatal(err)
		}
		if len(whole) != 262144 || !strings.HasPrefix(c.Output, tools.SizePointer(whole, c.Artifact)) {
			t.Errorf("run %d: artifact %s holds %d bytes; output %.200s", i, c.Artifact, len(whole), c.Output)
		}
	}
	if c := recs[1].ToolCalls[3]; c.ExitCode != 3 {
		t.Errorf("the failing command's exit code is %d", c.ExitCode)
	}
	// Of the 80 parts (all of one size), some stayed whole and the rest gave
	// way, just enough of them for the record to fit.
	whole, pointers := 0, 0
	for _, c := range recs[2].ToolCalls {
		if c.Artifact != "" {
			pointers++
		} else if strings.HasPrefix(c.Output, "part ") {
			whole++
		}
	}
	if pointers == 0 || whole == 0 || whole+pointers != 80 {
		t.Errorf("parts: %d whole, %d pointers; want both, 80 in all", whole, pointers)
	}
}
