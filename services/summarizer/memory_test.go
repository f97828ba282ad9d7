package summarizer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/internal/servicetest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/units"
)

// memoryFixture is the summarizer on the test Redis with a scripted model
// reached over HTTP through the real client, and a session whose tasks
// T1..Tn the tests approve one by one.
type memoryFixture struct {
	svc *Service
	st  *store.Store
	bus *servicetest.RecordingBus
	llm *scriptllm.Server
	tok *tokens.Counter
	n   int
}

func newMemoryFixture(t *testing.T, script scriptllm.Script, tasks int, mut func(*memory.Config)) *memoryFixture {
	t.Helper()
	srv := scriptllm.New(script)
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
	mc := memory.DefaultConfig()
	if mut != nil {
		mut(&mc)
	}
	f := &memoryFixture{st: st, bus: &servicetest.RecordingBus{}, llm: srv, tok: tok, n: tasks}
	f.svc = New(Deps{Bus: f.bus, Store: st, Model: model, Tokens: tok, Log: zap.NewNop(), Config: Config{Memory: mc}})
	view := store.SessionView{Session: "s1", Workspace: "/w", Phase: "iterating", Step: 1, Current: 0}
	for i := 1; i <= tasks; i++ {
		view.Tasks = append(view.Tasks, store.TaskView{Task: prd.Task{ID: fmt.Sprintf("T%d", i), Title: fmt.Sprintf("Generate report %d", i),
			AcceptanceCriteria: []string{"the report exists"}}, Status: "pending"})
	}
	if _, err := st.SaveState(context.Background(), "s1", 0, view); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= tasks; i++ {
		if err := st.AppendUnits(context.Background(), "s1", fmt.Sprintf("T%d", i), reportContext(i)...); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// reportContext is task Tn as the builder stores it: gen.sh fails without
// FOO=1, the notes say so, the run with FOO=1 works.
func reportContext(n int) []units.Unit {
	task := fmt.Sprintf("T%d", n)
	var us []units.Unit
	k := 0
	call := func(tool string, args map[string]string, result string) {
		k++
		b, _ := json.Marshal(args)
		id := fmt.Sprintf("%s-c%d", task, k)
		us = append(us,
			units.Unit{ID: fmt.Sprintf("assistant-%d", k), Role: "assistant", Kind: units.KindMessage, Turn: k, Tokens: 10,
				Calls: []units.Call{{ID: id, Name: tool, Args: string(b)}}},
			units.Unit{ID: fmt.Sprintf("tool-%d-0", k), Role: "tool", Kind: units.KindToolResult, Tool: tool, CallID: id, Args: b, Turn: k,
				Content: result, Tokens: 10})
	}
	us = append(us,
		units.Unit{ID: "system-" + task, Role: "system", Kind: units.KindMessage, Content: "You are the Builder.", Tokens: 5},
		units.Unit{ID: "task-" + task, Role: "user", Kind: units.KindMessage, Content: fmt.Sprintf("Task %s: Generate report %d", task, n), Tokens: 8})
	call("run", map[string]string{"command": fmt.Sprintf("sh gen.sh %d", n)}, "exit code 1\nerror: FOO is not set; see NOTES.md")
	call("read_file", map[string]string{"path": "NOTES.md"}, "Run gen.sh with FOO=1.")
	call("run", map[string]string{"command": fmt.Sprintf("FOO=1 sh gen.sh %d", n)}, fmt.Sprintf("exit code 0\ngenerated out/%d.txt", n))
	return append(us, units.Unit{ID: "assistant-9", Role: "assistant", Kind: units.KindMessage, Turn: 9, Tokens: 10,
		Content: fmt.Sprintf("Report %d is in out/%d.txt, generated with FOO=1 set.", n, n)})
}

// approve marks Tn done in the state, as the builder does before it
// publishes task.completed, and delivers that event to the summarizer.
func (f *memoryFixture) approve(t *testing.T, n int) events.MemoryUpdatedData {
	t.Helper()
	ctx := context.Background()
	var view store.SessionView
	ver, err := f.st.LoadState(ctx, "s1", &view)
	if err != nil {
		t.Fatal(err)
	}
	task := &view.Tasks[n-1]
	task.Status, task.FilesChanged = store.TaskDone, []string{fmt.Sprintf("out/%d.txt", n)}
	if _, err := f.st.SaveState(ctx, "s1", ver, view); err != nil {
		t.Fatal(err)
	}
	return f.deliver(t, n, task.ID)
}

func (f *memoryFixture) deliver(t *testing.T, n int, id string) events.MemoryUpdatedData {
	t.Helper()
	before := len(f.bus.Published())
	env := events.Must(events.TaskCompleted, "s1", id, 10*n, time.Now(), events.TaskCompletedData{TaskID: id, Iterations: 3, Attempts: 1})
	if err := f.svc.onTaskCompleted(context.Background(), env); err != nil {
		t.Fatalf("task.completed of %s: %v", id, err)
	}
	if len(f.bus.Published()) != before+1 {
		t.Fatalf("task.completed of %s published %d events, want memory.updated", id, len(f.bus.Published())-before)
	}
	d, err := events.DecodeAs[events.MemoryUpdatedData](f.bus.Published()[before])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (f *memoryFixture) memory(t *testing.T) memory.Memory {
	t.Helper()
	var m memory.Memory
	if _, err := f.st.LoadMemory(context.Background(), "s1", &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func script(t *testing.T, yaml string) scriptllm.Script {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(yaml), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The model extracts the learnings from the task's digest; the memory
// keeps them tagged with the task, with every file the task changed, and
// the model got a digest, not the context.
func TestMemoryFromTheModel(t *testing.T) {
	f := newMemoryFixture(t, script(t, `
rules:
  - name: extract
    when: {system_contains: "digest of a task it has just finished"}
    reply:
      content: "## Errors & Solutions\n- gen.sh fails with FOO is not set: run it as FOO=1 sh gen.sh N\n## Critical Context\n- [T7] The reports need FOO=1 in the environment"
`), 1, nil)
	d := f.approve(t, 1)
	if d.How != "llm" || d.LLMCalls != 1 || d.Notes != 3 || d.Tasks != 1 || d.Error != "" || d.MaxTokens != 1500 {
		t.Errorf("memory.updated %+v", d)
	}
	m := f.memory(t)
	want := "## Errors & Solutions\n- [T1] gen.sh fails with FOO is not set: run it as FOO=1 sh gen.sh N\n\n## Modified Files\n- [T1] out/1.txt\n\n" +
		"## Critical Context\n- [T1] The reports need FOO=1 in the environment"
	if m.Text != want {
		t.Errorf("memory =\n%s\nwant\n%s", m.Text, want)
	}
	if m.Tokens != f.tok.Count(m.Text) || d.Tokens != m.Tokens || len(m.Tasks) != 1 {
		t.Errorf("memory record %+v, event tokens %d", m, d.Tokens)
	}
	reqs := f.llm.Requests()
	prompt := reqs[0].Messages[1].Content
	for _, want := range []string{"Task T1: Generate report 1", "- run `sh gen.sh 1` -> failed: error: FOO is not set; see NOTES.md", "Run gen.sh with FOO=1."} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the extraction request lacks %q:\n%s", want, prompt)
		}
	}
	if strings.Contains(prompt, "You are the Builder") {
		t.Errorf("the extraction request carries the task's system prompt:\n%s", prompt)
	}
}

// With the model down, or slower than RALPH_MEMORY_TIMEOUT, the learnings
// are taken from the context without it, and the update still lands.
func TestMemoryWithoutTheModel(t *testing.T) {
	for name, yaml := range map[string]string{
		"down":     "rules:\n  - {name: down, error: {status: 503, message: overloaded}}\n",
		"too slow": "rules:\n  - {name: slow, delay: 30s, reply: {content: \"## Critical Context\\n- late\"}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := newMemoryFixture(t, script(t, yaml), 1, func(c *memory.Config) { c.MemoryTimeout = 300 * time.Millisecond })
			d := f.approve(t, 1)
			if d.How != "extractive" || d.Error != "" || d.LLMCalls != 1 {
				t.Errorf("memory.updated %+v, want an extractive update", d)
			}
			m := f.memory(t)
			if !strings.Contains(m.Text, "- [T1] `sh gen.sh 1` failed (error: FOO is not set; see NOTES.md); `FOO=1 sh gen.sh 1` worked") {
				t.Errorf("memory lacks the fix:\n%s", m.Text)
			}
			if strings.Contains(m.Text, "late") {
				t.Errorf("a reply that came after the timeout was used:\n%s", m.Text)
			}
		})
	}
}

// Over ten tasks the memory never outgrows its bound: it is summarised
// again, by the model when it answers within the bound, else
// extractively, and the newest task's learnings are always in it.
func TestMemoryStaysWithinItsBoundOverTenTasks(t *testing.T) {
	extract := func(n int) scriptllm.Rule {
		return scriptllm.Rule{Name: fmt.Sprintf("extract-T%d", n),
			When: scriptllm.Match{SystemContains: "digest of a task it has just finished", AnyContains: fmt.Sprintf("Task T%d: ", n)},
			Reply: &scriptllm.Reply{Content: fmt.Sprintf("## Key Decisions\n- report %d is written by gen.sh into out/%d.txt, one file per report, as the other reports are\n"+
				"## Errors & Solutions\n- gen.sh %d failed: FOO is not set; FOO=1 sh gen.sh %d worked\n## Critical Context\n- report %d needs FOO=1 like every report", n, n, n, n, n)}}
	}
	for name, merge := range map[string]*scriptllm.Rule{
		"merged by the model": {Name: "merge", When: scriptllm.Match{SystemContains: "outgrown its bound"},
			Reply: &scriptllm.Reply{Content: "## Critical Context\n- [T1,T2] every report needs FOO=1: FOO=1 sh gen.sh N"}},
		"merged extractively": {Name: "merge", When: scriptllm.Match{SystemContains: "outgrown its bound"}, Error: &scriptllm.ErrorReply{Status: 500}},
	} {
		t.Run(name, func(t *testing.T) {
			var sc scriptllm.Script
			for n := 1; n <= 10; n++ {
				sc.Rules = append(sc.Rules, extract(n))
			}
			sc.Rules = append(sc.Rules, *merge)
			const bound = 200
			f := newMemoryFixture(t, sc, 10, func(c *memory.Config) { c.MemoryMaxTokens = bound })
			resummaries := 0
			for n := 1; n <= 10; n++ {
				d := f.approve(t, n)
				m := f.memory(t)
				if m.Tokens > bound || f.tok.Count(m.Text) > bound || d.Tokens > bound {
					t.Fatalf("after T%d the memory is %d tokens (event %d), bound %d:\n%s", n, f.tok.Count(m.Text), d.Tokens, bound, m.Text)
				}
				if d.How != "llm" || len(m.Tasks) != n || d.Tasks != n {
					t.Errorf("after T%d: %+v, tasks %v", n, d, m.Tasks)
				}
				if d.Resummarized != "" {
					resummaries++
				}
				if !strings.Contains(m.Text, fmt.Sprintf("[T%d]", n)) {
					t.Errorf("after T%d the memory lost its learnings:\n%s", n, m.Text)
				}
			}
			m := f.memory(t)
			if resummaries == 0 || m.Resummaries != resummaries {
				t.Errorf("summarised again %d times (record %d); the fixture must outgrow the bound", resummaries, m.Resummaries)
			}
			if f.llm.Hits("merge") != resummaries {
				t.Errorf("the model was asked to merge %d times for %d re-summaries", f.llm.Hits("merge"), resummaries)
			}
			if !strings.Contains(m.Text, "FOO=1") {
				t.Errorf("the memory lost the fact every report needs:\n%s", m.Text)
			}
		})
	}
}

// A task.completed the state does not back (the task is not approved, or
// the session has no state) changes nothing; with memory off nothing is
// done at all; a redelivery does not learn twice.
func TestMemoryIgnoresWhatTheStateDoesNotShow(t *testing.T) {
	f := newMemoryFixture(t, script(t, "rules:\n  - {name: any, reply: {content: \"## Critical Context\\n- learned\"}}\n"), 2, nil)
	for _, env := range []events.Envelope{
		events.Must(events.TaskCompleted, "s1", "T1", 5, time.Now(), events.TaskCompletedData{TaskID: "T1"}),
		events.Must(events.TaskCompleted, "ghost", "T1", 5, time.Now(), events.TaskCompletedData{TaskID: "T1"}),
	} {
		if err := f.svc.onTaskCompleted(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.bus.Published()) != 0 || f.llm.Hits("any") != 0 || len(f.memory(t).Tasks) != 0 {
		t.Fatalf("a task the state does not show approved was learned from: %v", f.bus.Published())
	}
	f.approve(t, 1)
	again := f.deliver(t, 1, "T1")
	if m := f.memory(t); len(m.Tasks) != 1 || f.llm.Hits("any") != 1 || again.How != "llm" {
		t.Errorf("a redelivery learned again: tasks %v, %d model calls, %+v", m.Tasks, f.llm.Hits("any"), again)
	}

	off := newMemoryFixture(t, script(t, "rules:\n  - {name: any, reply: {content: \"x\"}}\n"), 1, func(c *memory.Config) { c.Memory = memory.Off })
	var view store.SessionView
	ver, _ := off.st.LoadState(context.Background(), "s1", &view)
	view.Tasks[0].Status = store.TaskDone
	if _, err := off.st.SaveState(context.Background(), "s1", ver, view); err != nil {
		t.Fatal(err)
	}
	if err := off.svc.onTaskCompleted(context.Background(), events.Must(events.TaskCompleted, "s1", "T1", 5, time.Now(), events.TaskCompletedData{TaskID: "T1"})); err != nil {
		t.Fatal(err)
	}
	if len(off.bus.Published()) != 0 || off.llm.Hits("any") != 0 {
		t.Errorf("memory off, yet the summarizer worked on it")
	}
}

// racingStore stores another task's learnings just before the first save
// of this one, as a concurrent update on another replica would.
type racingStore struct {
	*store.Store
	raced bool
}

func (r *racingStore) SaveMemory(ctx context.Context, session string, expect int64, v any) (int64, error) {
	if !r.raced {
		r.raced = true
		if _, err := r.Store.SaveMemory(ctx, session, expect, memory.Memory{Text: "## Critical Context\n- [T2] meanwhile", Tasks: []string{"T2"}}); err != nil {
			return 0, err
		}
	}
	return r.Store.SaveMemory(ctx, session, expect, v)
}

// An update that lost the compare-and-set adds its learnings to the memory
// as the other update left it: both tasks are in it.
func TestMemoryUpdatesDoNotOverwriteEachOther(t *testing.T) {
	f := newMemoryFixture(t, script(t, "rules:\n  - {name: any, reply: {content: \"## Critical Context\\n- T1's fact\"}}\n"), 2, nil)
	f.svc.d.Store = &racingStore{Store: f.st}
	f.approve(t, 1)
	m := f.memory(t)
	if !strings.Contains(m.Text, "[T2] meanwhile") || !strings.Contains(m.Text, "[T1] T1's fact") || len(m.Tasks) != 2 {
		t.Errorf("memory after a lost compare-and-set:\n%s\ntasks %v", m.Text, m.Tasks)
	}
}

// A reply the server cut at its token bound loses its unfinished last
// line, not a part of it: what the memory keeps is whole lines.
func TestMemoryKeepsWholeLinesOfACutReply(t *testing.T) {
	f := newMemoryFixture(t, script(t, `
rules:
  - name: cut
    reply:
      content: "## Critical Context\n- gen.sh needs FOO=1\n- and the reports are che"
      finish_reason: length
`), 1, nil)
	if d := f.approve(t, 1); d.How != "llm" {
		t.Fatalf("memory.updated %+v", d)
	}
	m := f.memory(t)
	if !strings.Contains(m.Text, "- [T1] gen.sh needs FOO=1") || strings.Contains(m.Text, "che") {
		t.Errorf("memory from a cut reply:\n%s", m.Text)
	}
}
