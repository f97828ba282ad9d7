package mesh_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/units"
	"github.com/ralphmesh/ralph/services/builder"
)

// eventsOf decodes the payloads of every event of type typ.
func eventsOf[T any](t *testing.T, got []events.Envelope, typ events.Type) []T {
	t.Helper()
	var out []T
	for _, env := range got {
		if env.Type == typ {
			var v T
			if err := env.Decode(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
	}
	return out
}

// loopingReads is a builder that reads notes.txt over and over.
const loopingReads = `{model: builder, reply: {content: "Let me read the notes again.", tool_calls: [{name: read_file, arguments: {path: notes.txt}}]}}`

func TestLoopingSessionIsPrunedAndFinishes(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {any_contains: "Your context was pruned"}, times: 1, reply: {content: "Now I know what the notes say; writing the summary.", tool_calls: [{name: write_file, arguments: {path: summary.txt, content: "remember the milk\n"}}]}}
  - {model: builder, when: {any_contains: "Your context was pruned"}, reply: {content: "summary.txt holds the summary of the notes."}}
  - `+loopingReads+`
  - {model: pruner, reply: {content: "notes.txt was read many times; it says: remember the milk. Nothing else was found."}}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "ok"}'}}
`))
	h.cfg.Pruner.Model = "pruner"
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector", "pruner")
	ws := workspace(t, map[string]string{"notes.txt": "remember the milk\n" + longSource("notes", 30)})
	h.start(m, "e2e-prune", parsePRD(t, `
tasks:
  - {id: P1, title: Summarise the notes, acceptance_criteria: [summary.txt summarises notes.txt]}
`), ws)
	got := h.wait(m, "e2e-prune")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s, want completed; events %v", last.Type, types(got))
	}
	pruned := eventsOf[events.PruneCompletedData](t, got, events.PruneCompleted)
	if len(pruned) != 1 || pruned[0].Error != "" || pruned[0].Fallback || pruned[0].LLMCalls != 1 {
		t.Fatalf("prune.completed %+v, want one successful prune with the model", pruned)
	}
	p := pruned[0]
	if p.TokensAfter >= p.TokensBefore || len(p.RemovedUnits) == 0 {
		t.Fatalf("prune removed nothing: %+v", p)
	}
	if !slices.Contains(p.KeptUnits, "system-P1") || !slices.Contains(p.KeptUnits, "task-P1") {
		t.Fatalf("kept %v: the instructions must survive a prune", p.KeptUnits)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "summary.txt")); err != nil || string(data) != "remember the milk\n" {
		t.Fatalf("summary.txt: %q, %v", data, err)
	}
	// The context the builder continued with: the instructions verbatim,
	// the note, none of the removed units, then the new work.
	ctxUnits, err := m.Store.Units(context.Background(), "e2e-prune", "P1")
	if err != nil {
		t.Fatal(err)
	}
	initial := builder.InitialContext(ws, parsePRD(t, `
tasks:
  - {id: P1, title: Summarise the notes, acceptance_criteria: [summary.txt summarises notes.txt]}
`).Tasks[0])
	for i, want := range initial {
		if ctxUnits[i].ID != want.ID || ctxUnits[i].Content != want.Content {
			t.Fatalf("unit %d after prune = %s %q, want %s verbatim", i, ctxUnits[i].ID, ctxUnits[i].Content, want.ID)
		}
	}
	if !slices.ContainsFunc(ctxUnits, func(u units.Unit) bool {
		return strings.HasPrefix(u.ID, "pruned-") && strings.Contains(u.Content, "remember the milk")
	}) {
		t.Fatal("no prune note carrying what the removed units established")
	}
	for _, u := range ctxUnits {
		if slices.Contains(p.RemovedUnits, u.ID) {
			t.Fatalf("removed unit %s is back in the context", u.ID)
		}
	}
}

func TestStuckTaskIsDecomposedAndFinishes(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {first_user_contains: "Task D1.1:", last_role: user}, reply: {content: "Writing the title.", tool_calls: [{name: write_file, arguments: {path: report.md, content: "# Notes report\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task D1.1:"}, reply: {content: "report.md has its title."}}
  - {model: builder, when: {first_user_contains: "Task D1.2:", last_role: user}, reply: {content: "Appending the notes.", tool_calls: [{name: edit_file, arguments: {path: report.md, old: "# Notes report\n", new: "# Notes report\n- remember the milk\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task D1.2:"}, reply: {content: "report.md lists the notes."}}
  - `+loopingReads+`
  - {model: pruner, reply: {content: "notes.txt says: remember the milk."}}
  - model: decomposer
    reply:
      content: |
        {"subtasks": [
          {"id": "title", "title": "Give report.md a title", "description": "Create report.md with a level-1 title.", "acceptance_criteria": ["report.md starts with a # title"]},
          {"id": "list", "title": "List the notes in report.md", "description": "Add every line of notes.txt as a bullet.", "acceptance_criteria": ["report.md lists every note"], "depends_on": ["title"]}
        ]}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "ok"}'}}
`))
	h.cfg.Pruner.Model = "pruner"
	h.cfg.Decomposer.Model = "decomposer"
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector", "pruner", "decomposer")
	ws := workspace(t, map[string]string{"notes.txt": "remember the milk\n"})
	h.start(m, "e2e-decompose", parsePRD(t, `
tasks:
  - {id: D1, title: Write the notes report, acceptance_criteria: [report.md has a title, report.md lists every note]}
`), ws)
	got := h.wait(m, "e2e-decompose")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s, want completed; events %v", last.Type, types(got))
	}
	if n := len(eventsOf[events.PruneCompletedData](t, got, events.PruneCompleted)); n != 1 {
		t.Fatalf("%d prunes; the ladder prunes once before it decomposes", n)
	}
	dec := eventsOf[events.TaskDecomposedData](t, got, events.TaskDecomposed)
	if len(dec) != 1 || dec[0].Error != "" || len(dec[0].Subtasks) != 2 {
		t.Fatalf("task.decomposed %+v", dec)
	}
	if s := dec[0].Subtasks; s[0].ID != "D1.1" || s[1].ID != "D1.2" || s[1].DependsOn[0] != "D1.1" || s[0].ParentID != "D1" {
		t.Fatalf("subtasks %+v", s)
	}
	var order []string
	for _, d := range eventsOf[events.TaskCompletedData](t, got, events.TaskCompleted) {
		order = append(order, d.TaskID)
	}
	if !slices.Equal(order, []string{"D1.1", "D1.2", "D1"}) {
		t.Fatalf("tasks completed in order %v, want the subtasks, then their parent", order)
	}
	reviews := eventsOf[events.CritiqueRequestedData](t, got, events.CritiqueRequested)
	if last := reviews[len(reviews)-1]; last.Task.ID != "D1" || !strings.Contains(last.Summary, "D1.2: List the notes") {
		t.Fatalf("the parent's review %+v", last)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "report.md")); string(data) != "# Notes report\n- remember the milk\n" {
		t.Fatalf("report.md = %q", data)
	}
}
