package summarizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/units"
	"github.com/ralphmesh/ralph/services/summarizer"
)

// fixture is an executor on the test Redis with a scripted summarizer
// model reached through the real client over HTTP.
type fixture struct {
	exec *summarizer.Executor
	llm  *scriptllm.Server
}

func newFixture(t *testing.T, script string, mode compaction.Mode) fixture {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(script), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(s)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	model, err := llm.New(llm.RoleSummarizer, llm.Endpoint{BaseURL: url, Model: "sum", MaxRetries: -1, Timeout: 10 * time.Second}, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := store.Connect(context.Background(), meshtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	st := store.New(rdb, meshtest.Prefix(t), time.Hour)
	tok, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	opts := compaction.DefaultOptions()
	opts.Mode, opts.Model = mode, "sum"
	return fixture{llm: srv, exec: &summarizer.Executor{Model: model, Cache: st, Artifacts: st, Tokens: tok, Options: opts,
		SummaryPrompt: summarizer.DefaultSummaryPrompt, MaxSummaryTokens: 800, CacheTTL: time.Hour}}
}

// draftingContext is a task that read three long logs and a spec, ran a
// failing build, and is writing draft.md.
func draftingContext(tok *tokens.Counter) []units.Unit {
	var us []units.Unit
	add := func(u units.Unit) {
		n := tok.Count(u.Content)
		for _, c := range u.Calls {
			n += tok.Count(c.Name) + tok.Count(c.Args)
		}
		u.Tokens = n
		us = append(us, u)
	}
	add(units.Unit{ID: "system-T1", Role: "system", Kind: units.KindMessage, Content: "You are the Builder of Ralph mesh."})
	add(units.Unit{ID: "task-T1", Role: "user", Kind: units.KindMessage, Content: "Task T1: Write draft.md\n\nAcceptance criteria:\n- draft.md explains the outage\n"})
	for step := 1; step <= 3; step++ {
		var log strings.Builder
		for i := 0; i < 80; i++ {
			fmt.Fprintf(&log, "2026-11-0%d 12:%02d:00 worker-%d processed batch %d in %d ms\n", step, i%60, i%4, i, 100+i*7)
		}
		args := fmt.Sprintf(`{"command":"cat logs/day%d.log"}`, step)
		add(units.Unit{ID: fmt.Sprintf("assistant-%d", step), Role: "assistant", Kind: units.KindMessage, Turn: step,
			Content: fmt.Sprintf("Looking at day %d's log.", step), Calls: []units.Call{{ID: fmt.Sprintf("c%d", step), Name: "run", Args: args}}})
		add(units.Unit{ID: fmt.Sprintf("tool-%d-0", step), Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: fmt.Sprintf("c%d", step),
			Args: json.RawMessage(args), Turn: step, Content: "exit code 0\n" + log.String()})
	}
	add(units.Unit{ID: "assistant-4", Role: "assistant", Kind: units.KindMessage, Turn: 4, Content: "Building to check the tooling.",
		Calls: []units.Call{{ID: "c4", Name: "run", Args: `{"command":"make"}`}}})
	add(units.Unit{ID: "tool-4-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "c4", Args: json.RawMessage(`{"command":"make"}`), Turn: 4,
		Content: "exit code 2\nmain.go:12: undefined: parseBatch\nmake: *** [build] Error 1"})
	add(units.Unit{ID: "assistant-5", Role: "assistant", Kind: units.KindMessage, Turn: 5, Content: "Writing the draft.",
		Calls: []units.Call{{ID: "c5", Name: "write_file", Args: `{"path":"draft.md","content":"# Outage\nBatches slowed on day 3.\n"}`}}})
	add(units.Unit{ID: "tool-5-0", Role: "tool", Kind: units.KindToolResult, Tool: "write_file", CallID: "c5",
		Args: json.RawMessage(`{"path":"draft.md"}`), Turn: 5, Content: "wrote 35 bytes to draft.md"})
	return us
}

func planFor(t *testing.T, f fixture, us []units.Unit, limit int, hist compaction.History) compaction.Result {
	t.Helper()
	p, err := compaction.Plan(context.Background(), compaction.Document{LimitTokens: limit, CurrentTurn: 6, Task: compaction.Task{Goal: "Write draft.md"}, Units: us},
		f.exec.Options, hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Ops) == 0 {
		t.Fatalf("no ops planned at %d of %d tokens", p.TokensBefore, limit)
	}
	return p
}

func TestApplyCachesUnchangedPayloads(t *testing.T) {
	f := newFixture(t, `
rules:
  - {model: sum, reply: {content: "Workers processed batches steadily; no errors."}}
`, compaction.ModeTiered)
	tok := f.exec.Tokens.(*tokens.Counter)
	us := draftingContext(tok)
	limit := units.Total(us) * 100 / 80 // 80% full: pressure
	var hist compaction.History
	p := planFor(t, f, us, limit, hist)
	first, err := f.exec.Apply(context.Background(), "s1", "T1", us, p, summarizer.Facts{}, &hist)
	if err != nil {
		t.Fatal(err)
	}
	if first.LLMCalls == 0 || first.CacheHits != 0 {
		t.Fatalf("first apply: %d calls, %d cache hits; want calls and no hits", first.LLMCalls, first.CacheHits)
	}
	calls := len(f.llm.Requests())
	// The same payloads, target and label again (a redelivered compaction,
	// another replica): every compaction comes from the cache.
	second, err := f.exec.Apply(context.Background(), "s1", "T1", us, p, summarizer.Facts{}, &compaction.History{})
	if err != nil {
		t.Fatal(err)
	}
	if second.LLMCalls != 0 || second.CacheHits != first.LLMCalls || len(f.llm.Requests()) != calls {
		t.Fatalf("second apply: %d calls, %d cache hits, %d model requests (was %d)", second.LLMCalls, second.CacheHits, len(f.llm.Requests()), calls)
	}
	if !slices.EqualFunc(first.Units, second.Units, func(a, b units.Unit) bool { return a.ID == b.ID && a.Content == b.Content }) {
		t.Fatal("a cached compaction gave another context")
	}
	// The history says what is cached, so the next plan counts no call.
	if !hist.Cached[p.Ops[len(p.Ops)-1].CacheKey] && p.Ops[len(p.Ops)-1].LLMCall {
		t.Fatalf("history does not remember the cached result of %s", p.Ops[len(p.Ops)-1].Unit)
	}
}

// TestNoTextIsCut: whatever the mode and whether or not the model answers,
// every unit after compaction is either the original, the model's whole
// answer under a marker, a pointer with whole lines of the original, or a
// checkpoint; no unit ends in the middle of one of its original lines.
func TestNoTextIsCut(t *testing.T) {
	for _, mode := range []compaction.Mode{compaction.ModeLegacy, compaction.ModeTiered, compaction.ModeTieredAdaptive} {
		for _, down := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s model down %v", mode, down), func(t *testing.T) {
				script := `
rules:
  - {model: sum, reply: {content: "## Key Decisions\n- read the logs\n## Errors & Solutions\n- none\n## Modified Files\n- none\n## Critical Context\n- day 3 slow"}}
`
				if down {
					script = `
rules:
  - {model: sum, error: {status: 503, message: "overloaded"}}
`
				}
				f := newFixture(t, script, mode)
				tok := f.exec.Tokens.(*tokens.Counter)
				us := draftingContext(tok)
				orig := map[string]units.Unit{}
				for _, u := range compaction.ExpandCalls(us) {
					orig[u.ID] = u
				}
				var hist compaction.History
				p := planFor(t, f, us, units.Total(us)*100/95, hist)
				out, err := f.exec.Apply(context.Background(), "s1", "T1", us, p, summarizer.Facts{
					ModifiedFiles: []string{"draft.md"}, UnresolvedErrors: []string{"main.go:12: undefined: parseBatch"}}, &hist)
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Applied) == 0 {
					t.Fatal("nothing applied")
				}
				for _, a := range out.Applied {
					if down && a.How == "llm" {
						t.Fatalf("op on %s says llm while the model is down", a.Unit)
					}
				}
				for _, u := range compaction.ExpandCalls(out.Units) {
					o, known := orig[u.ID]
					switch {
					case known && u.Content == o.Content:
					case strings.HasPrefix(u.Content, "[checkpoint"):
						for _, fact := range []string{"draft.md", "undefined: parseBatch"} {
							if !strings.Contains(u.Content, fact) {
								t.Errorf("checkpoint lacks %q:\n%s", fact, u.Content)
							}
						}
					case strings.HasPrefix(u.Content, "[compacted") && !down:
						if !strings.HasSuffix(strings.TrimSpace(u.Content), "day 3 slow") {
							t.Errorf("%s: the model's answer is not whole:\n%s", u.ID, u.Content)
						}
					default:
						// A pointer or an extractive digest: every line
						// after the marker is a whole line of the original.
						lines := strings.Split(u.Content, "\n")
						for _, l := range lines[1:] {
							if l == "" || strings.HasPrefix(l, "[") {
								continue
							}
							if !slices.Contains(strings.Split(o.Content, "\n"), l) {
								t.Errorf("%s: line %q is not a whole line of the original", u.ID, l)
							}
						}
					}
				}
			})
		}
	}
}

func TestFactsOf(t *testing.T) {
	result := func(id, tool, args, content string) units.Unit {
		return units.Unit{ID: id, Role: "tool", Kind: units.KindToolResult, Tool: tool, Args: json.RawMessage(args), Content: content}
	}
	us := []units.Unit{
		{ID: "assistant-1", Role: "assistant", Kind: units.KindMessage, Calls: []units.Call{
			{ID: "c1", Name: "write_file", Args: `{"path":"docs/a.md","content":"x"}`},
			{ID: "c2", Name: "edit_file", Args: `{"path":"b.go","old":"a","new":"b"}`}}},
		result("tool-2-0", "run", `{"command":"go test ./..."}`, "exit code 1\n--- FAIL: TestA\nFAIL"),
		result("tool-3-0", "run", `{"command":"make lint"}`, "exit code 2\nlint.go:3: error: unused variable x"),
		result("tool-4-0", "run", `{"command":"go test ./..."}`, "exit code 0\nok"),
		result("tool-5-0", "read_file", `{"path":"gone.txt"}`, `error: read_file: path "gone.txt" does not exist`),
	}
	f := summarizer.FactsOf(us, []string{"notes.md"})
	if want := []string{"notes.md", "docs/a.md", "b.go"}; !slices.Equal(f.ModifiedFiles, want) {
		t.Errorf("modified files %v, want %v", f.ModifiedFiles, want)
	}
	// go test failed, then passed: solved. make lint and the read are not.
	if want := []string{"lint.go:3: error: unused variable x", `error: read_file: path "gone.txt" does not exist`}; !slices.Equal(f.UnresolvedErrors, want) {
		t.Errorf("unresolved errors %q, want %q", f.UnresolvedErrors, want)
	}
}

func TestFactsOfIgnoresProseAboutFailure(t *testing.T) {
	us := []units.Unit{
		{ID: "tool-1-0", Role: "tool", Kind: units.KindToolResult, Tool: "read_file", Args: json.RawMessage(`{"path":"interview.md"}`),
			Content: "She said the failures are where the lessons are.\nAn error: of judgement, she called it."},
		{ID: "tool-2-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", Args: json.RawMessage(`{"command":"sh check.sh"}`),
			Content: "exit code 0\n0 failures"},
		{ID: "tool-3-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", Args: json.RawMessage(`{"command":"sh links.sh"}`),
			Content: "exit code 1\nchecking 12 files\nprofiles/p07.md: source missing"},
		{ID: "tool-4-0", Role: "tool", Kind: units.KindToolResult, Tool: "run", Args: json.RawMessage(`{"command":"sleep 99"}`),
			Content: "partial output\nerror: timed out after 2m0s"},
	}
	f := summarizer.FactsOf(us, nil)
	if want := []string{"profiles/p07.md: source missing", "error: timed out after 2m0s"}; !slices.Equal(f.UnresolvedErrors, want) {
		t.Fatalf("unresolved errors %q, want %q", f.UnresolvedErrors, want)
	}
}

func TestPromptVersion(t *testing.T) {
	if summarizer.PromptVersion("") != "v1" || summarizer.PromptVersion(summarizer.DefaultSummaryPrompt) != "v1" {
		t.Fatal("the built-in prompt is not v1")
	}
	a, b := summarizer.PromptVersion("Summarise tersely."), summarizer.PromptVersion("Summarise at length.")
	if a == "v1" || a == b || a != summarizer.PromptVersion("Summarise tersely.") {
		t.Fatalf("custom prompt versions %q and %q: want distinct, stable, not v1", a, b)
	}
}
