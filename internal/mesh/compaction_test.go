package mesh_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/units"
)

// longSource is a file whose reading fills the context quickly.
func longSource(name string, lines int) string {
	var b strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&b, "%s line %d: the quarterly figures for region %d were reviewed and filed.\n", name, i, i%7)
	}
	return b.String()
}

// TestCompactionCyclesKeepTheSessionUnderItsWindow: a builder that reads
// ten long sources, one per turn, then writes a report, in a context window
// that holds about three of them. The builder asks for compaction each
// time the context passes 70% of the window; the summarizer compacts the
// old reads, or, under pressure while it cannot yet reach its target,
// waits (the plan's hysteresis); the session completes with the task and
// system prompt intact.
func TestCompactionCyclesKeepTheSessionUnderItsWindow(t *testing.T) {
	compactionCycles(t, "")
}

// The same on a real three-master Redis Cluster: the summarizer's context
// compare-and-set and its history stay in the session's slot, and the
// compaction cache's keys (shared by sessions) stand alone.
func TestCompactionCyclesOnRedisCluster(t *testing.T) {
	compactionCycles(t, meshtest.RedisCluster(t))
}

// compactionCycles runs the session on the Redis of redisURL ("" for the
// test Redis).
func compactionCycles(t *testing.T, redisURL string) {
	var rules strings.Builder
	rules.WriteString("rules:\n")
	for i := 1; i <= 10; i++ {
		// times: 1 makes the rules a sequence whatever the context holds
		// after compaction.
		fmt.Fprintf(&rules, "  - {model: builder, times: 1, reply: {content: \"Reading source %d and noting it.\", tool_calls: "+
			"[{name: read_file, arguments: {path: src%02d.txt}}, {name: write_file, arguments: {path: notes/src%02d.md, content: \"source %d reviewed\\n\"}}]}}\n", i, i, i, i)
	}
	rules.WriteString(`  - {model: builder, times: 1, reply: {content: "Writing the report.", tool_calls: [{name: write_file, arguments: {path: report.md, content: "# Report\nAll ten sources reviewed.\n"}}]}}
  - {model: builder, reply: {content: "report.md summarises all ten sources."}}
  - {model: summarizer, reply: {content: "Read a source file: quarterly figures by region, reviewed and filed."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`)
	h := newHarness(t, parseScript(t, rules.String()))
	if redisURL != "" {
		h.cfg.Redis.URL = redisURL
	}
	h.cfg.Summarizer.Model = "summarizer"
	h.cfg.Builder.ContextWindow = 6000
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector", "summarizer")
	files := map[string]string{}
	for i := 1; i <= 10; i++ {
		name := fmt.Sprintf("src%02d.txt", i)
		files[name] = longSource(name, 60)
	}
	ws := workspace(t, files)
	h.start(m, "e2e-compact", parsePRD(t, `
tasks:
  - {id: R1, title: Report on the ten sources, acceptance_criteria: [report.md covers src01.txt to src10.txt]}
`), ws)
	got := h.wait(m, "e2e-compact")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s, want completed; events %v", last.Type, types(got))
	}
	done := eventsOf[events.SessionCompletedData](t, got, events.SessionCompleted)[0]
	comps := eventsOf[events.CompactionCompletedData](t, got, events.CompactionCompleted)
	reqs := eventsOf[events.CompactionRequestedData](t, got, events.CompactionRequested)
	changed := 0
	for _, c := range comps {
		if c.TokensAfter < c.TokensBefore {
			changed++
		}
	}
	if changed < 2 || done.Compactions != changed {
		t.Fatalf("%d compactions changed the context (session says %d), want several cycles", changed, done.Compactions)
	}
	for i, c := range comps {
		t.Logf("compaction %d at %d tokens: %s, %d -> %d tokens, %d applied, %d skipped, %d LLM calls, %d cache hits",
			i+1, reqs[i].ContextTokens, c.Tier, c.TokensBefore, c.TokensAfter, len(c.Applied), len(c.Skipped), c.LLMCalls, c.CacheHits)
		if c.Error != "" || c.Tier == "normal" {
			t.Fatalf("compaction %d: %+v", i, c)
		}
		if len(c.Applied) == 0 {
			// A plan that waits changes nothing, and only under pressure.
			if c.Tier != "pressure" || c.TokensAfter != c.TokensBefore || len(c.Planned) != 0 {
				t.Fatalf("compaction %d did nothing: %+v", i, c)
			}
		} else if c.TokensAfter >= c.TokensBefore {
			t.Fatalf("compaction %d: %+v", i, c)
		}
		if reqs[i].ContextTokens < 4200 {
			t.Fatalf("compaction %d requested at %d tokens, under the threshold of 4200", i, reqs[i].ContextTokens)
		}
	}
	// Every iteration's context stayed within the window.
	for _, r := range eventsOf[events.IterationRecord](t, got, events.IterationCompleted) {
		if r.ContextTokens > 6000 {
			t.Fatalf("iteration %d had %d context tokens, over the window", r.Iteration, r.ContextTokens)
		}
	}
	us, err := m.Store.Units(context.Background(), "e2e-compact", "R1")
	if err != nil {
		t.Fatal(err)
	}
	if us[0].ID != "system-R1" || us[1].ID != "task-R1" || !strings.Contains(us[1].Content, "report.md covers src01.txt to src10.txt") {
		t.Fatalf("instructions after compaction: %s %s", us[0].ID, us[1].ID)
	}
	if !slices.ContainsFunc(us, func(u units.Unit) bool {
		return strings.HasPrefix(u.Content, "[compacted") || strings.HasPrefix(u.Content, "[checkpoint") || strings.Contains(u.Content, "replaced by a pointer")
	}) {
		t.Fatal("no compacted unit in the final context")
	}
}

// TestLegacyCheckpointKeepsTheFacts: in legacy mode every compaction is one
// structured summary by the summarizer model. The model's summary names
// no file; the checkpoint the builder continues with names every file the
// task wrote anyway, because the summarizer checks it against the session.
func TestLegacyCheckpointKeepsTheFacts(t *testing.T) {
	var rules strings.Builder
	rules.WriteString("rules:\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&rules, "  - {model: builder, times: 1, reply: {content: \"Reading source %d and noting it.\", tool_calls: "+
			"[{name: read_file, arguments: {path: src%02d.txt}}, {name: write_file, arguments: {path: notes/src%02d.md, content: \"source %d reviewed\\n\"}}]}}\n", i, i, i, i)
	}
	rules.WriteString(`  - {model: builder, reply: {content: "All six sources are noted."}}
  - {model: summarizer, reply: {content: "## Key Decisions\n- read the sources in order\n## Errors & Solutions\n- none\n## Modified Files\n## Critical Context\n- figures are by region"}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`)
	h := newHarness(t, parseScript(t, rules.String()))
	h.cfg.Summarizer.Model = "summarizer"
	h.cfg.Builder.ContextWindow = 6000
	h.cfg.Compaction.Mode = "legacy"
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector", "summarizer")
	files := map[string]string{}
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("src%02d.txt", i)
		files[name] = longSource(name, 60)
	}
	h.start(m, "e2e-legacy", parsePRD(t, `
tasks:
  - {id: N1, title: Note the six sources, acceptance_criteria: [notes/ has one note per source]}
`), workspace(t, files))
	got := h.wait(m, "e2e-legacy")
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		t.Fatalf("session ended with %s, want completed; events %v", last.Type, types(got))
	}
	comps := eventsOf[events.CompactionCompletedData](t, got, events.CompactionCompleted)
	if len(comps) == 0 || comps[0].LLMCalls != 1 || comps[0].Mode != "legacy" || len(comps[0].Applied) != 1 || comps[0].Applied[0].Op != "checkpoint_merge" {
		t.Fatalf("compactions %+v, want a legacy checkpoint merge by the model", comps)
	}
	us, err := m.Store.Units(context.Background(), "e2e-legacy", "N1")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(us, func(u units.Unit) bool { return u.ID == "checkpoint-N1" })
	if i < 0 {
		t.Fatal("no checkpoint in the context")
	}
	cp := us[i].Content
	if !strings.Contains(cp, "## Key Decisions") || !strings.Contains(cp, "figures are by region") {
		t.Fatalf("checkpoint is not the model's structured summary:\n%s", cp)
	}
	// Every note written before the checkpoint is named in it.
	for n := 1; n <= 6; n++ {
		path := fmt.Sprintf("notes/src%02d.md", n)
		inContext := slices.ContainsFunc(us, func(u units.Unit) bool {
			return u.ID != "checkpoint-N1" && (strings.Contains(u.Content, path) || slices.ContainsFunc(u.Calls, func(c units.Call) bool { return strings.Contains(c.Args, path) }))
		})
		if !inContext && !strings.Contains(cp, path) {
			t.Errorf("%s is neither in the context nor in the checkpoint:\n%s", path, cp)
		}
	}
	if us[0].ID != "system-N1" || us[1].ID != "task-N1" || us[2].ID != "checkpoint-N1" {
		t.Fatalf("context starts %s, %s, %s; want the instructions, then the checkpoint", us[0].ID, us[1].ID, us[2].ID)
	}
}
