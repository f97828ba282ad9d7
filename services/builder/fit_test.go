package builder

import (
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/units"
)

// byteTokens counts a token per four bytes, a stand-in for the tokenizer.
type byteTokens struct{}

func (byteTokens) Count(s string) int { return len(s) / 4 }

func TestMeasurer(t *testing.T) {
	m := Measurer(byteTokens{}, 4096)
	f := m([]units.Unit{{Content: strings.Repeat("x", 400)}, {Content: strings.Repeat("y", 40)}})
	if f.Instructions != 110 || f.Reply != 4096 || f.Tools < 100 {
		t.Fatalf("fit %+v: want the units' 110 tokens, the reply's 4096 and the tool definitions'", f)
	}
	if f.Total() != f.Instructions+f.Tools+f.Reply || !strings.Contains(f.String(), "instructions 110") {
		t.Fatalf("total %d, %s", f.Total(), f)
	}
}

// A PRD task whose instructions cannot fit in the window is named with
// the token counts, before any task starts.
func TestUnfitTaskIsNamed(t *testing.T) {
	d := twoTasks()
	d.PRD.Tasks[1].Description = strings.Repeat("a requirement. ", 4000) // 60 KB: 15000 tokens here
	lim := limitsUnderTest
	lim.ContextWindow = 12_000
	s, _ := Start("s1", d, lim, t0)
	m := Measurer(byteTokens{}, 1000)
	reason := s.Unfit(m)
	for _, want := range []string{"task T2 cannot start", "its first request needs", "reply 1000", "context window of 12000 tokens"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q lacks %q", reason, want)
		}
	}
	lim.ContextWindow = 100_000
	s, _ = Start("s1", d, lim, t0)
	if reason := s.Unfit(m); reason != "" {
		t.Fatalf("a PRD that fits: %s", reason)
	}
}

// A decomposition into a subtask whose own instructions cannot fit is
// refused: the task is escalated with the reason, and nothing starts.
func TestDecompositionRefusesASubtaskThatCannotFit(t *testing.T) {
	decompose := events.Signal{Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}
	lim := limitsUnderTest
	lim.ContextWindow = 5_000
	subs := subtasks("T1.1", "T1.2")
	subs[1].Description = strings.Repeat("every detail, spelled out. ", 1000) // 27 KB
	s, _ := Start("s1", twoTasks(), lim, t0)
	s, _ = stuck(t, s, decompose)
	next, cmds := step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: subs}, Measure: Measurer(byteTokens{}, 1000)})
	if next.Phase != PhaseEscalated || !eq(published(cmds), []events.Type{events.SessionEscalated}) {
		t.Fatalf("phase %s, published %v; want the decomposition refused", next.Phase, published(cmds))
	}
	if !strings.Contains(next.Reason, "decomposition was refused: task T1.2 cannot start") || len(next.Tasks) != 2 {
		t.Fatalf("reason %q, %d tasks", next.Reason, len(next.Tasks))
	}
}

// What is measured is what the task starts with: for a subtask, the
// instructions with its parent's context, as startNextTask appends them.
func TestMeasuredInstructionsAreWhatTheSubtaskStartsWith(t *testing.T) {
	decompose := events.Signal{Pattern: "no_progress", Confidence: 0.8, Action: events.ActionDecompose, Diagnosis: "nothing changes"}
	s, _ := Start("s1", twoTasks(), limitsUnderTest, t0)
	s, _ = stuck(t, s, decompose)
	var measured [][]units.Unit
	measure := func(us []units.Unit) Fit {
		measured = append(measured, us)
		return Fit{Instructions: 10}
	}
	_, cmds := step(t, s, Decomposed{Step: s.Step, Data: events.TaskDecomposedData{ParentID: "T1", Subtasks: subtasks("T1.1", "T1.2")}, Measure: measure})
	var started []units.Unit
	for _, c := range cmds {
		if c.Append != nil && c.Append.Scope == "T1.1" {
			started = c.Append.Units
		}
	}
	if len(measured) != 2 || len(started) == 0 || !slices.EqualFunc(measured[0], started, func(a, b units.Unit) bool { return a.ID == b.ID && a.Content == b.Content }) {
		t.Fatalf("measured %d sets; the first %+v\nstarted with %+v", len(measured), measured, started)
	}
	if !strings.Contains(started[len(started)-1].Content, "T1.1, T1.2") {
		t.Fatalf("the parent's context does not name the subtasks: %q", started[len(started)-1].Content)
	}
}
