package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

// artifacts is a content-addressed artifact store, as pkg/store's is.
type artifacts map[string]string

func (a artifacts) put(_ context.Context, content string) (string, error) {
	sum := sha256.Sum256([]byte(content))
	id := "a-" + hex.EncodeToString(sum[:8])
	a[id] = content
	return id, nil
}

// lines is n numbered lines of about width bytes each.
func lines(n, width int, tag string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s line %d %s\n", tag, i, strings.Repeat("x", width))
	}
	return b.String()
}

func encoded(t *testing.T, rec events.IterationRecord) int {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func TestBoundRecordCarriesALargeOutputAsItsPointer(t *testing.T) {
	arts := artifacts{}
	big := lines(2000, 60, "read")
	rec := events.IterationRecord{Iteration: 1, ToolCalls: []events.ToolCall{
		{Name: tools.ReadFile, Args: json.RawMessage(`{"path":"big.txt"}`), Output: big},
		{Name: tools.ReadFile, Args: json.RawMessage(`{"path":"small.txt"}`), Output: "small\n"},
	}}
	got, err := boundRecord(t.Context(), rec, 16384, 1<<20, arts.put)
	if err != nil {
		t.Fatal(err)
	}
	c := got.ToolCalls[0]
	if c.Artifact == "" || arts[c.Artifact] != big {
		t.Fatalf("the large output is not kept whole as artifact %q", c.Artifact)
	}
	if c.Output != tools.PointerDigest(big, c.Artifact, 8192) {
		t.Fatalf("the large output is not carried as the context's pointer digest:\n%.300s", c.Output)
	}
	if s := got.ToolCalls[1]; s.Output != "small\n" || s.Artifact != "" {
		t.Fatalf("a small output changed: %+v", s)
	}
	if rec.ToolCalls[0].Output != big {
		t.Fatal("boundRecord wrote into its caller's tool calls")
	}
}

// Many calls whose outputs each fit inline but not together: the largest
// become pointers until the record fits, the others stay whole.
func TestBoundRecordPointsAtTheLargestUntilItFits(t *testing.T) {
	arts := artifacts{}
	rec := events.IterationRecord{Iteration: 4, AssistantText: "running the checks"}
	for i := range 12 {
		rec.ToolCalls = append(rec.ToolCalls, events.ToolCall{Name: tools.Run,
			Args: json.RawMessage(fmt.Sprintf(`{"command":"check %d"}`, i)), Output: lines(100+10*i, 40, fmt.Sprint("c", i))})
	}
	rec.ToolCalls[3].ExitCode, rec.ToolCalls[3].Output = 1, lines(130, 40, "c3")+"c3: error: the check failed\n"
	const budget = 40_000
	if encoded(t, rec) <= budget {
		t.Fatal("the test record fits already")
	}
	got, err := boundRecord(t.Context(), rec, 1<<20, budget, arts.put)
	if err != nil {
		t.Fatal(err)
	}
	if n := encoded(t, got); n > budget {
		t.Fatalf("record is %d bytes, over the budget of %d", n, budget)
	}
	var pointed []int
	for i, c := range got.ToolCalls {
		if c.Artifact == "" {
			if c.Output != rec.ToolCalls[i].Output {
				t.Errorf("call %d changed without becoming a pointer", i)
			}
			continue
		}
		pointed = append(pointed, i)
		if arts[c.Artifact] != rec.ToolCalls[i].Output || !strings.HasPrefix(c.Output, tools.SizePointer(rec.ToolCalls[i].Output, c.Artifact)) {
			t.Errorf("call %d: output %q does not point at its artifact", i, c.Output)
		}
	}
	// The outputs grow with i: the last ones are the largest.
	if len(pointed) == 0 || pointed[0] != 12-len(pointed) {
		t.Fatalf("calls %v became pointers; want the largest ones", pointed)
	}
	if got.AssistantText != rec.AssistantText {
		t.Fatal("the model's text changed while outputs could still shrink")
	}
	// A failed call keeps the line that says what failed.
	rec2 := rec
	rec2.ToolCalls = []events.ToolCall{rec.ToolCalls[3], rec.ToolCalls[3]}
	rec2.ToolCalls[1].Args = json.RawMessage(`{"command":"check 3 again"}`)
	got2, err := boundRecord(t.Context(), rec2, 1<<20, 1000, arts.put)
	if err != nil {
		t.Fatal(err)
	}
	if out := got2.ToolCalls[0].Output; !strings.HasSuffix(out, "\nc3: error: the check failed") || tools.ErrorLine(out) != "c3: error: the check failed" {
		t.Fatalf("a failed call's pointer lost its error line: %q", out)
	}
}

// Arguments and the model's text give way too, after the outputs; what
// cannot fit at all is a clear error.
func TestBoundRecordShrinksArgsAndTextLast(t *testing.T) {
	arts := artifacts{}
	content, _ := json.Marshal(lines(3000, 50, "w"))
	rec := events.IterationRecord{Iteration: 2, AssistantText: lines(800, 50, "said"), ToolCalls: []events.ToolCall{
		{Name: tools.WriteFile, Args: json.RawMessage(`{"path":"a.txt","content":` + string(content) + `}`), Output: "wrote 1 bytes to a.txt"},
	}}
	got, err := boundRecord(t.Context(), rec, 16384, 20_000, arts.put)
	if err != nil {
		t.Fatal(err)
	}
	if n := encoded(t, got); n > 20_000 {
		t.Fatalf("record is %d bytes", n)
	}
	var args string
	if err := json.Unmarshal(got.ToolCalls[0].Args, &args); err != nil || !tools.IsPointerLine(args) {
		t.Fatalf("args %s: want a JSON string holding the pointer line", got.ToolCalls[0].Args)
	}
	if !strings.HasPrefix(got.AssistantText, "[") || !strings.Contains(got.AssistantText, "said line 0 ") {
		t.Fatalf("the model's text is not a digest of whole lines: %.200s", got.AssistantText)
	}
	if got.ToolCalls[0].Output != "wrote 1 bytes to a.txt" {
		t.Fatalf("a short output became a pointer longer than itself: %q", got.ToolCalls[0].Output)
	}

	many := events.IterationRecord{Iteration: 3}
	for i := range 200 {
		many.ToolCalls = append(many.ToolCalls, events.ToolCall{Name: tools.ListDir, Output: strings.Repeat("f\n", 200+i)})
	}
	if _, err := boundRecord(t.Context(), many, 16384, 5000, arts.put); !errors.Is(err, ErrRecordTooLarge) || !strings.Contains(err.Error(), "iteration 3") {
		t.Fatalf("a record that cannot fit: %v", err)
	}
}

// The stuck detector still recognises a repeat when the output it repeats
// travels as a pointer: the artifact id is content-addressed, so the same
// output gives the same pointer, and a different one a different pointer.
func TestRepeatedLargeOutputsStillLookRepeated(t *testing.T) {
	arts := artifacts{}
	cfg := stuckdetector.DefaultConfig()
	window := func(outputs []string, exit int) []events.IterationRecord {
		var recs []events.IterationRecord
		for i, out := range outputs {
			rec := events.IterationRecord{Iteration: i + 1, TaskID: "T1", WorkspaceHash: "same",
				AssistantText: fmt.Sprintf("Step %d: let me look at the log.", i+1),
				ToolCalls:     []events.ToolCall{{Name: tools.Run, Args: json.RawMessage(`{"command":"cat build.log"}`), Output: out, ExitCode: exit}}}
			bounded, err := boundRecord(t.Context(), rec, 16384, 1<<20, arts.put)
			if err != nil {
				t.Fatal(err)
			}
			if bounded.ToolCalls[0].Artifact == "" {
				t.Fatal("the output was not large enough to become a pointer")
			}
			recs = append(recs, bounded)
		}
		return recs
	}
	same := lines(1000, 40, "log")
	if sig := stuckdetector.Analyze(window([]string{same, same, same}, 0), cfg, []stuckdetector.Pattern{stuckdetector.CircularTools{}}); sig == nil {
		t.Fatal("the same large output three times is not seen as circular")
	}
	growing := []string{lines(1000, 40, "log"), lines(1001, 40, "log"), lines(1002, 40, "log")}
	if sig := stuckdetector.Analyze(window(growing, 0), cfg, []stuckdetector.Pattern{stuckdetector.CircularTools{}}); sig != nil {
		t.Fatalf("an output that changes each time is seen as circular: %+v", sig)
	}
	failing := lines(1000, 40, "build") + "main.go:3: undefined: Foo\n"
	if sig := stuckdetector.Analyze(window([]string{failing, failing, failing}, 1), cfg, []stuckdetector.Pattern{stuckdetector.ActionErrorLoop{}}); sig == nil ||
		!strings.Contains(sig.Diagnosis, "undefined: Foo") {
		t.Fatalf("the same large failure three times: %+v, want an action_error_loop quoting its error", sig)
	}
}
