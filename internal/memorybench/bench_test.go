package memorybench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/memory"
)

// The end-to-end test, on the test NATS and Redis with every
// service: task T1 finds out by exploring that the reports need FOO=1;
// with memory on, T3's first builder request holds that, and every task
// after T1 uses it at once; the memory stays within its bound over ten
// tasks, summarised again on the way. With memory off, the same session
// finds the fact out again in every task.
func TestALaterTaskStartsWithWhatTheFirstFoundOut(t *testing.T) {
	cfg := meshconfig.New(t)
	cfg.Memory = memory.DefaultConfig()
	const bound = 200 // small enough that ten tasks outgrow it
	cfg.Memory.MemoryMaxTokens = bound
	log := zap.NewNop()
	if os.Getenv("RALPH_TEST_LOG") != "" {
		log, _ = zap.NewDevelopment()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, Options{Tasks: 10, Session: "memory-e2e", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	on, _ := rep.Result(memory.On)
	off, _ := rep.Result(memory.Off)
	for _, r := range []Result{on, off} {
		if !r.Completed() {
			t.Fatalf("memory %s: the session ended %s: %s", r.Memory, r.Outcome, r.Reason)
		}
	}

	memoryOf := func(r Result, task string) string {
		for _, m := range r.FirstContexts[task] {
			if strings.HasPrefix(m.Content, memory.Header) {
				return m.Content
			}
		}
		return ""
	}
	if got := memoryOf(on, "T3"); !strings.Contains(got, "FOO=1") {
		t.Errorf("T3's first request has no memory of FOO=1; its memory unit: %q", got)
	}
	if got := memoryOf(on, "T1"); got != "" {
		t.Errorf("T1 started with a memory: %q", got)
	}
	for _, m := range off.FirstContexts["T3"] {
		if strings.Contains(m.Content, "FOO=1") {
			t.Errorf("with memory off, T3 started knowing FOO=1: %q", m.Content)
		}
	}

	if want := []int{4, 2, 2, 2, 2, 2, 2, 2, 2, 2}; !equal(on.TaskIterations, want) {
		t.Errorf("memory on: iterations per task %v, want %v (only T1 explores)", on.TaskIterations, want)
	}
	if want := []int{4, 4, 4, 4, 4, 4, 4, 4, 4, 4}; !equal(off.TaskIterations, want) {
		t.Errorf("memory off: iterations per task %v, want %v (every task explores)", off.TaskIterations, want)
	}

	if len(on.MemoryUpdates) != 10 {
		t.Errorf("%d memory updates, want one per task: %+v", len(on.MemoryUpdates), on.MemoryUpdates)
	}
	resummarized := 0
	for _, d := range on.MemoryUpdates {
		if d.Tokens > bound || d.MaxTokens != bound || d.Error != "" {
			t.Errorf("memory update %+v: over its bound of %d, or failed", d, bound)
		}
		if d.Resummarized != "" {
			resummarized++
		}
	}
	if resummarized == 0 || on.Resummaries != resummarized || on.MemoryTokens > bound {
		t.Errorf("the memory was summarised again %d times (record %d, %d tokens at the end); ten tasks must outgrow %d tokens",
			resummarized, on.Resummaries, on.MemoryTokens, bound)
	}
	if !rep.Passed() {
		t.Error("the report does not pass")
	}
	var md, table bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| builder iterations | 40 | 22 | 0.55 |", "The memory task T3 started with:"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the Markdown report lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(table.String(), "builder iterations") {
		t.Errorf("table:\n%s", table.String())
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
