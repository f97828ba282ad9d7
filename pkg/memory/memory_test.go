package memory

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/units"
)

// words counts a token per word: the tests control every size.
func words(s string) int { return len(strings.Fields(s)) }

// taskContext is task T1 as the builder stores it: the system prompt and
// the task, a run that fails because FOO is not set, a read of the notes
// that say so, the run again with FOO=1, a write, and the closing message.
func taskContext() []units.Unit {
	var us []units.Unit
	step := 0
	call := func(text, tool string, args any, result, artifact string) {
		step++
		b, _ := json.Marshal(args)
		id := fmt.Sprintf("c%d", step)
		us = append(us,
			units.Unit{ID: fmt.Sprintf("assistant-%d", step), Role: "assistant", Kind: units.KindMessage, Turn: step, Content: text,
				Calls: []units.Call{{ID: id, Name: tool, Args: string(b)}}},
			units.Unit{ID: fmt.Sprintf("tool-%d-0", step), Role: "tool", Kind: units.KindToolResult, Tool: tool, CallID: id,
				Args: b, Turn: step, Content: result, Artifact: artifact})
	}
	us = append(us,
		units.Unit{ID: "system-T1", Role: "system", Kind: units.KindMessage, Content: "You are the Builder."},
		units.Unit{ID: "task-T1", Role: "user", Kind: units.KindMessage, Content: "Task T1: Generate report 1\n\nAcceptance criteria:\n- out/1.txt exists\n"})
	call("Generating the report.", "run", map[string]string{"command": "sh gen.sh 1"}, "exit code 1\nerror: FOO is not set; see NOTES.md", "")
	call("Reading the notes.", "read_file", map[string]string{"path": "NOTES.md"}, "# Notes\nRun gen.sh with FOO=1 in the environment.\n", "")
	call("", "run", map[string]string{"command": "cat big.log"}, "exit code 0\n[log stored]\nline 1\nline 2", "a-0123456789abcdef")
	call("Again, with FOO=1.", "run", map[string]string{"command": "FOO=1 sh gen.sh 1"}, "exit code 0\ngenerated out/1.txt", "")
	call("Noting it.", "write_file", map[string]string{"path": "out/notes.txt", "content": "done"}, "wrote 4 bytes to out/notes.txt", "")
	us = append(us, units.Unit{ID: "assistant-6", Role: "assistant", Kind: units.KindMessage, Turn: 6,
		Content: "Generated out/1.txt. gen.sh needs FOO=1 in its environment."})
	return us
}

var taskT1 = Task{ID: "T1", Title: "Generate report 1", FilesChanged: []string{"out/1.txt"}}

func TestLearningsWithoutAModel(t *testing.T) {
	ns := Learnings(taskT1, taskContext(), 400, words)
	want := Notes{
		{Section: ErrorsAndSolutions, Task: "T1", Text: "`sh gen.sh 1` failed (error: FOO is not set; see NOTES.md); `FOO=1 sh gen.sh 1` worked"},
		{Section: CriticalContext, Task: "T1", Text: "`FOO=1 sh gen.sh 1` ran clean at the end of the task"},
		{Section: KeyDecisions, Task: "T1", Text: "Generated out/1.txt. gen.sh needs FOO=1 in its environment."},
		{Section: ModifiedFiles, Task: "T1", Text: "out/1.txt"},
		{Section: ModifiedFiles, Task: "T1", Text: "out/notes.txt"},
	}
	if !reflect.DeepEqual(ns, want) {
		t.Errorf("Learnings =\n%#v\nwant\n%#v", ns, want)
	}
	small := Learnings(taskT1, taskContext(), 25, words)
	if n := words(small.Render()); n > 25 || len(small) == 0 {
		t.Errorf("bounded to 25 tokens: %d tokens in %d notes", n, len(small))
	}
	if small[0] != want[0] {
		t.Errorf("the bounded learnings lost the fix first: %v", small)
	}
}

func TestLearningsNameTheFilesChangedBetweenAFailureAndItsFix(t *testing.T) {
	res := func(id, tool, args, content string, turn int) units.Unit {
		return units.Unit{ID: id, Role: "tool", Kind: units.KindToolResult, Tool: tool, Args: json.RawMessage(args), Content: content, Turn: turn}
	}
	us := []units.Unit{
		res("r1", "run", `{"command":"go test ./..."}`, "exit code 1\ncalc.go:3: undefined: Add", 1),
		res("r2", "run", `{"command":"go test ./..."}`, "exit code 1\ncalc.go:3: undefined: Add", 2),
		res("r3", "edit_file", `{"path":"calc.go"}`, "edited calc.go", 3),
		res("r4", "run", `{"command":"go test ./..."}`, "exit code 0\nok", 4),
		res("r5", "run", `{"command":"go vet ./..."}`, "exit code 1\nvet: something", 5),
	}
	got := Learnings(Task{ID: "T2"}, us, 400, words)
	var fixes []string
	for _, n := range got {
		if n.Section == ErrorsAndSolutions {
			fixes = append(fixes, n.Text)
		}
	}
	want := []string{"`go test ./...` failed (calc.go:3: undefined: Add); `go test ./...` worked after changing calc.go"}
	if !reflect.DeepEqual(fixes, want) {
		t.Errorf("fixes = %q, want %q (one per fix; an unfixed failure is left out)", fixes, want)
	}
}

func TestDigest(t *testing.T) {
	stored := taskContext()
	stored = append(stored[:2:2], append([]units.Unit{{ID: compaction.MemoryUnitID("T1"), Role: "user", Kind: units.KindMessage,
		Content: Header + "\n## Critical Context\n- [T0] SECRET-OF-AN-EARLIER-TASK"}}, stored[2:]...)...)
	d := Digest(taskT1, stored, 1000, words)
	for _, want := range []string{
		"Task T1: Generate report 1",
		"Files it changed: out/1.txt, out/notes.txt",
		"- run `sh gen.sh 1` -> failed: error: FOO is not set; see NOTES.md",
		"- read_file NOTES.md -> ok",
		"Run gen.sh with FOO=1 in the environment.",
		"- run `FOO=1 sh gen.sh 1` -> ok",
		"stored whole as artifact a-0123456789abcdef",
		"Builder: Reading the notes.",
		"The builder's closing message:\nGenerated out/1.txt.",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("digest lacks %q:\n%s", want, d)
		}
	}
	for _, not := range []string{"You are the Builder", "Acceptance criteria", "SECRET-OF-AN-EARLIER-TASK", "line 2"} {
		if strings.Contains(d, not) {
			t.Errorf("digest has %q (the head, earlier memory or an artifact's text):\n%s", not, d)
		}
	}
}

func TestDigestIsBoundedInWholeLines(t *testing.T) {
	stored := taskContext()
	for i := range 200 {
		stored = append(stored, units.Unit{ID: fmt.Sprintf("r%d", i), Role: "tool", Kind: units.KindToolResult, Tool: "run", Turn: 7 + i,
			Args: json.RawMessage(fmt.Sprintf(`{"command":"ls dir%d"}`, i)), Content: "exit code 0\nfile-a file-b"})
	}
	full := Digest(taskT1, stored, 100_000, words)
	d := Digest(taskT1, stored, 300, words)
	if n := words(d); n > 300 {
		t.Errorf("digest is %d tokens, bound 300", n)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(full, "\n") {
		lines[l] = true
	}
	for _, l := range strings.Split(d, "\n") {
		if !lines[l] && !strings.HasPrefix(l, "[extract:") {
			t.Errorf("line %q of the bounded digest is no line of the whole one", l)
		}
	}
	if !strings.Contains(d, "FOO is not set") {
		t.Errorf("the bounded digest lost the error line:\n%s", d)
	}
}

func TestParseAndRender(t *testing.T) {
	text := "```markdown\nHere is the summary.\n## Key Decisions\n- [T1] chose a table\n* untagged one\n## Errors and solutions\n1. [T2] `make` failed\n   continued here\n## Conventions\n- tabs, not spaces\n## Files changed\n- a.go\n```"
	ns := Parse(text, "T9")
	want := Notes{
		{Section: CriticalContext, Task: "T9", Text: "Here is the summary."},
		{Section: KeyDecisions, Task: "T1", Text: "chose a table"},
		{Section: KeyDecisions, Task: "T9", Text: "untagged one"},
		{Section: ErrorsAndSolutions, Task: "T2", Text: "`make` failed\ncontinued here"},
		{Section: CriticalContext, Task: "T9", Text: "tabs, not spaces"},
		{Section: ModifiedFiles, Task: "T9", Text: "a.go"},
	}
	if !reflect.DeepEqual(ns, want) {
		t.Fatalf("Parse =\n%#v\nwant\n%#v", ns, want)
	}
	r := ns.Render()
	wantText := "## Key Decisions\n- [T1] chose a table\n- [T9] untagged one\n\n## Errors & Solutions\n- [T2] `make` failed\n  continued here\n\n" +
		"## Modified Files\n- [T9] a.go\n\n## Critical Context\n- [T9] Here is the summary.\n- [T9] tabs, not spaces"
	if r != wantText {
		t.Errorf("Render =\n%s\nwant\n%s", r, wantText)
	}
	if back := Parse(r, ""); !reflect.DeepEqual(back, Notes{want[1], want[2], want[3], want[5], want[0], want[4]}) {
		t.Errorf("Parse(Render) =\n%#v", back)
	}
}

func TestAddSaysAFactOnce(t *testing.T) {
	old := Notes{{Section: CriticalContext, Task: "T1", Text: "The tests need FOO=1."}}
	learned := Notes{
		{Section: CriticalContext, Task: "T2", Text: "the tests  need FOO=1"},
		{Section: KeyDecisions, Task: "T2", Text: "the tests need FOO=1"},
		{Section: CriticalContext, Task: "T2", Text: "BAR=2 too"},
	}
	got := Add(old, learned)
	want := Notes{old[0], learned[1], learned[2]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Add =\n%#v\nwant\n%#v", got, want)
	}
}

func TestBoundKeepsWholeNotesByKindThenNewest(t *testing.T) {
	var ns Notes
	for i := 1; i <= 6; i++ {
		task := fmt.Sprintf("T%d", i)
		ns = append(ns,
			Note{Section: ModifiedFiles, Task: task, Text: fmt.Sprintf("file%d.go", i)},
			Note{Section: KeyDecisions, Task: task, Text: fmt.Sprintf("decision of task %d", i)},
			Note{Section: ErrorsAndSolutions, Task: task, Text: fmt.Sprintf("error %d solved by fix %d", i, i)},
		)
	}
	if got, dropped := Bound(ns, 10_000, words); !reflect.DeepEqual(got, ns) || dropped != 0 {
		t.Errorf("within the bound, Bound changed the notes (%d dropped)", dropped)
	}
	got, dropped := Bound(ns, 60, words)
	if n := words(got.Render()); n > 60 {
		t.Fatalf("bounded to %d tokens, want at most 60", n)
	}
	if dropped != len(ns)-len(got) || dropped == 0 {
		t.Errorf("dropped = %d for %d of %d notes kept", dropped, len(got), len(ns))
	}
	var errs []string
	for _, n := range got {
		if n.Section == ModifiedFiles {
			t.Errorf("kept a file note %q while decisions were dropped", n.Text)
		}
		if n.Section == ErrorsAndSolutions {
			errs = append(errs, n.Task)
		}
	}
	if want := []string{"T1", "T2", "T3", "T4", "T5", "T6"}; !reflect.DeepEqual(errs, want) {
		t.Errorf("errors kept from %v, want all of %v, in order", errs, want)
	}
	for i, n := range got {
		if i > 0 && n.Section == KeyDecisions && got[i-1].Section == KeyDecisions && n.Task < got[i-1].Task {
			t.Errorf("notes out of order: %v", got)
		}
	}
	// The decisions kept are the newest ones.
	for _, n := range got {
		if n.Section == KeyDecisions && n.Task == "T1" {
			t.Errorf("kept T1's decision over a newer one: %v", got)
		}
	}
}

func TestUnitIsInTheStableHeadAndTheInstructionLane(t *testing.T) {
	us := taskContext()
	u := Unit("T3", Memory{Text: "## Critical Context\n- [T1] gen.sh needs FOO=1"})
	with := append(us[:2:2], append([]units.Unit{u}, us[2:]...)...)
	if got := compaction.StableHead(with); got != 3 {
		t.Errorf("StableHead = %d, want 3 (system, task, memory)", got)
	}
	if lane := compaction.Classify(compaction.Document{Units: with})[u.ID]; lane != compaction.LaneInstruction {
		t.Errorf("memory lane %s, want instruction", lane)
	}
	if !strings.HasPrefix(u.Content, Header+"\n") || !strings.Contains(u.Content, "FOO=1") {
		t.Errorf("unit content %q", u.Content)
	}
}

func TestCovers(t *testing.T) {
	m := Memory{Tasks: []string{"T1", "T2"}}
	if !m.Covers(nil) || !m.Covers([]string{"T2", "T1"}) || m.Covers([]string{"T1", "T3"}) {
		t.Error("Covers is wrong")
	}
}

func TestConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil || !c.Enabled() {
		t.Fatalf("defaults: %v, enabled %v", err, c.Enabled())
	}
	if (Config{}).Enabled() {
		t.Error("the zero Config is on; a service built without the wiring would wait for a memory nobody writes")
	}
	c.Memory, c.MemoryMaxTokens, c.MemoryWait = "maybe", 10, -1
	var fields []string
	settings.Each(c.Validate(), func(inv *settings.Invalid) { fields = append(fields, inv.Field) })
	if want := []string{"Memory", "MemoryMaxTokens", "MemoryWait"}; !reflect.DeepEqual(fields, want) {
		t.Errorf("invalid fields %v, want %v", fields, want)
	}
	if c := DefaultConfig(); c.TaskTokens() != 375 || c.TargetTokens() != 750 {
		t.Errorf("shares of 1500: task %d, target %d", c.TaskTokens(), c.TargetTokens())
	}
}
