package builder

import (
	"strings"
	"testing"
)

func entry(task, summary string) ProgressEntry {
	return ProgressEntry{Session: "s1", TaskID: task, Title: "Title of " + task, Summary: summary,
		Files: []string{"a.go", "b.go"}, Verdict: "All met.", Verify: "go test ./..."}
}

func TestAddProgressToANewFile(t *testing.T) {
	got := AddProgress("", entry("T1", "Added a.go.\n\nLearnings:\n- Pattern: run tests with FOO=1\n- the fixture is slow"))
	want := `# Progress

## Codebase patterns
- run tests with FOO=1

## T1: Title of T1 (session s1)
Done: Added a.go.
Files: a.go, b.go
Reviewer: All met.
Learnings:
- Pattern: run tests with FOO=1
- the fixture is slow
- ` + "`go test ./...`" + ` passes (the reviewer's check)
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if p := Patterns(got); p != "- run tests with FOO=1" {
		t.Errorf("patterns %q", p)
	}
}

func TestAddProgressKeepsTheFileAndReplacesTheSameEntry(t *testing.T) {
	// A Ralph loop's progress.txt, with its own patterns section.
	old := "## Codebase Patterns\n- use pnpm\n\n## 2025-01-01 - US-001\n- did things\n"
	got := AddProgress(old, entry("T2", "x\nLearnings:\n- Pattern: use pnpm\n- Pattern: migrations live in db/"))
	if !strings.HasPrefix(got, "## Codebase Patterns\n- use pnpm\n- migrations live in db/\n\n## 2025-01-01 - US-001\n- did things\n\n## T2: ") {
		t.Errorf("got:\n%s", got)
	}
	// The same task of the same session again (a redelivery, a second
	// approval after a refused commit): one entry, the newer.
	again := AddProgress(got, entry("T2", "y"))
	if strings.Count(again, "## T2: ") != 1 || !strings.Contains(again, "Done: y") || strings.Contains(again, "Done: x") {
		t.Errorf("again:\n%s", again)
	}
	if !strings.Contains(again, "- did things") {
		t.Errorf("an earlier entry was lost:\n%s", again)
	}
	// Another session's entry of the same task id is another entry.
	other := entry("T2", "z")
	other.Session = "s2"
	if n := strings.Count(AddProgress(again, other), "## T2: "); n != 2 {
		t.Errorf("%d entries of T2 after another session's", n)
	}
}

func TestAddProgressPutsPatternsAtTheTop(t *testing.T) {
	got := AddProgress("# Notes of the team\nsome text\n", entry("T1", "Learnings:\n- Pattern: p1"))
	if !strings.HasPrefix(got, "# Notes of the team\n\n## Codebase patterns\n- p1\n\n## Notes\nsome text\n\n## T1") {
		t.Errorf("got:\n%s", got)
	}
}

func TestPatternsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("## Codebase patterns\n")
	for i := 0; i < 1000; i++ {
		b.WriteString("- a pattern that is long enough to count\n")
	}
	p := Patterns(b.String())
	if len(p) > maxPatterns+100 || !strings.HasSuffix(p, "more in progress.txt)") {
		t.Errorf("%d bytes, ending %q", len(p), p[len(p)-40:])
	}
}
