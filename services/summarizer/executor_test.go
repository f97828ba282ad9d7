package summarizer_test

import (
	"context"
	"encoding/json"
	"errors"
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
	p, err := compaction.Plan(compaction.Document{LimitTokens: limit, CurrentTurn: 6, Task: compaction.Task{Goal: "Write draft.md"}, Units: us},
		f.exec.Options, hist)
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
	// A failed run whose output has no words for its error is quoted by its
	// first line, as the stuck detector quotes it (tools.ErrorLine).
	if want := []string{"checking 12 files", "error: timed out after 2m0s"}; !slices.Equal(f.UnresolvedErrors, want) {
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

// opFixtures are ops of each kind on the drafting context, as the planner
// would write them. An op kind the planner gains needs a fixture here and
// a case in the executor.
func opFixtures(us []units.Unit) map[compaction.OpKind]compaction.Op {
	tokensOf := map[string]int{}
	for _, u := range compaction.ExpandCalls(us) {
		tokensOf[u.ID] = u.Tokens
	}
	op := func(unit string, kind compaction.OpKind, tool string, lane compaction.Lane) compaction.Op {
		return compaction.Op{Unit: unit, Op: kind, Lane: lane, Label: compaction.Label(kind, tool, lane),
			Tokens: tokensOf[unit], OutputTokens: max(tokensOf[unit]/4, 16), LLMCall: kind != compaction.OpReplaceWithPointer}
	}
	merge := op("assistant-1", compaction.OpCheckpointMerge, "", compaction.LaneHistoricalChat)
	merge.Units = []string{"assistant-1", "assistant-1#c1", "tool-1-0"}
	merge.Tokens = tokensOf["assistant-1"] + tokensOf["assistant-1#c1"] + tokensOf["tool-1-0"]
	return map[compaction.OpKind]compaction.Op{
		compaction.OpReplaceWithPointer: op("tool-3-0", compaction.OpReplaceWithPointer, "run", compaction.LaneToolTrace),
		compaction.OpCompactToolArgs:    op("assistant-5#c5", compaction.OpCompactToolArgs, "write_file", compaction.LaneActiveWrite),
		compaction.OpCompactToolOutput:  op("tool-2-0", compaction.OpCompactToolOutput, "run", compaction.LaneToolTrace),
		compaction.OpCompactHistorical:  op("assistant-4", compaction.OpCompactHistorical, "", compaction.LaneHistoricalChat),
		compaction.OpCheckpointMerge:    merge,
	}
}

// TestApplyCarriesOutEveryPlannedOpKind walks every op kind the planner can
// emit (compaction.OpKinds): the executor carries each out, none is
// skipped.
func TestApplyCarriesOutEveryPlannedOpKind(t *testing.T) {
	f := newFixture(t, `
rules:
  - {model: sum, reply: {content: "Short."}}
`, compaction.ModeTieredAdaptive)
	us := draftingContext(f.exec.Tokens.(*tokens.Counter))
	fixtures := opFixtures(us)
	for _, kind := range compaction.OpKinds() {
		t.Run(string(kind), func(t *testing.T) {
			op, ok := fixtures[kind]
			if !ok {
				t.Fatalf("the planner can emit %s, which this test has no op of: add one, and executor support for it", kind)
			}
			out, err := f.exec.Apply(context.Background(), "s1", "T1", us, compaction.Result{Ops: []compaction.Op{op}}, summarizer.Facts{}, &compaction.History{})
			if err != nil {
				t.Fatalf("Apply(%s): %v", kind, err)
			}
			if len(out.Applied) != 1 || out.Applied[0].Op != string(kind) || out.Applied[0].Unit != op.Unit || out.Applied[0].How == "" {
				t.Fatalf("Apply(%s) applied %+v", kind, out.Applied)
			}
		})
	}
}

func TestApplyRefusesAnOpKindItDoesNotKnow(t *testing.T) {
	f := newFixture(t, `
rules:
  - {model: sum, reply: {content: "Short."}}
`, compaction.ModeTieredAdaptive)
	us := draftingContext(f.exec.Tokens.(*tokens.Counter))
	known := opFixtures(us)[compaction.OpCompactToolOutput]
	for _, kind := range []compaction.OpKind{"summarize_everything", compaction.OpKeepRaw, ""} {
		unknown := known
		unknown.Op, unknown.Unit = kind, "tool-3-0"
		out, err := f.exec.Apply(context.Background(), "s1", "T1", us, compaction.Result{Ops: []compaction.Op{known, unknown}}, summarizer.Facts{}, &compaction.History{})
		if !errors.Is(err, summarizer.ErrUnknownOp) || !strings.Contains(err.Error(), fmt.Sprintf("%q", kind)) {
			t.Fatalf("Apply with op kind %q: err %v, want ErrUnknownOp naming it", kind, err)
		}
		// Refused before anything was done: the known op before it made no
		// model call.
		if len(out.Applied) != 0 || len(f.llm.Requests()) != 0 {
			t.Fatalf("op kind %q: %d ops applied and %d model requests before the refusal", kind, len(out.Applied), len(f.llm.Requests()))
		}
	}
}

// TestMergeKeepsTheStableHead: the checkpoint goes right after the stable
// head (the leading system and user messages of turn 0), which comes out
// byte for byte as it went in, so that a provider's prompt cache keeps it;
// a user message of a later turn that happens to follow the head (guidance
// given before the first step was merged away) goes after the checkpoint,
// in its place in the conversation.
func TestMergeKeepsTheStableHead(t *testing.T) {
	f := newFixture(t, `
rules:
  - {model: sum, reply: {content: "## Key Decisions\n- Read the logs."}}
`, compaction.ModeTieredAdaptive)
	tok := f.exec.Tokens.(*tokens.Counter)
	base := draftingContext(tok)
	memory := units.Unit{ID: "memory-T1", Role: "user", Kind: units.KindMessage, Content: "Project notes: logs are in logs/.", Tokens: 9}
	guidance := units.Unit{ID: "resume-2", Role: "user", Kind: units.KindMessage, Turn: 2, Content: "Use the day 3 log.", Tokens: 6}
	tests := []struct {
		name string
		us   []units.Unit
		head []string // ids before the checkpoint
		next string   // id right after it
	}{
		{"system prompt and task", base, []string{"system-T1", "task-T1"}, "assistant-4"},
		{"a leading memory message is head", slices.Insert(slices.Clone(base), 2, memory), []string{"system-T1", "task-T1", "memory-T1"}, "assistant-4"},
		{"later guidance is not", slices.Insert(slices.Clone(base), 2, guidance), []string{"system-T1", "task-T1"}, "resume-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := compaction.Op{Unit: "assistant-1", Op: compaction.OpCheckpointMerge, Lane: compaction.LaneHistoricalChat,
				Units: []string{"assistant-1", "assistant-1#c1", "tool-1-0", "assistant-2", "assistant-2#c2", "tool-2-0", "assistant-3", "assistant-3#c3", "tool-3-0"},
				Label: "checkpoint_merge", Tokens: 3000, OutputTokens: 200}
			out, err := f.exec.Apply(context.Background(), "s1", "T1", tt.us, compaction.Result{Ops: []compaction.Op{op}}, summarizer.Facts{}, &compaction.History{})
			if err != nil {
				t.Fatal(err)
			}
			k := len(tt.head)
			for i, id := range tt.head {
				src := slices.IndexFunc(tt.us, func(u units.Unit) bool { return u.ID == id })
				if out.Units[i].ID != id || out.Units[i].Content != tt.us[src].Content {
					t.Fatalf("unit %d is %s, want the head's %s unchanged", i, out.Units[i].ID, id)
				}
			}
			if out.Units[k].Kind != units.KindSummary || out.Units[k+1].ID != tt.next {
				t.Fatalf("after the head: %s (%s), then %s; want the checkpoint, then %s", out.Units[k].ID, out.Units[k].Kind, out.Units[k+1].ID, tt.next)
			}
		})
	}
}
