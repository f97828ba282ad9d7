package compaction

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/tokens"
)

const buildLog = `go test ./...
ok  	github.com/ralphmesh/ralph/pkg/units	0.004s
ok  	github.com/ralphmesh/ralph/pkg/tokens	0.310s
--- FAIL: TestLoad (0.00s)
    load_test.go:42: want nats://nats:4222, got ""
FAIL	github.com/ralphmesh/ralph/pkg/config	0.012s
ok  	github.com/ralphmesh/ralph/pkg/prd	0.006s
We decided to keep the envconfig prefix as RALPH.
the quick brown fox jumps over the lazy dog
the quick brown fox jumps over the lazy dog again
panic: runtime error: index out of range [3] with length 3
TODO: cover the OPENAI_ fallback
lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod`

func TestExtractKeepsWholeImportantLines(t *testing.T) {
	counter, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Split(buildLog, "\n")
	note := regexp.MustCompile(`^\[extract: (\d+) of (\d+) lines left out\]$`)
	for _, budget := range []int{10000, 150, 90, 70, 60, 40, 25} {
		out := Extract(buildLog, budget, counter.Count)
		if n := counter.Count(out); n > budget {
			t.Errorf("budget %d: %d tokens", budget, n)
		}
		if budget >= counter.Count(buildLog) {
			if out != buildLog {
				t.Errorf("text within budget changed")
			}
			continue
		}
		lines := strings.Split(out, "\n")
		m := note.FindStringSubmatch(lines[len(lines)-1])
		if m == nil {
			t.Errorf("budget %d: no note at the end: %q", budget, out)
			continue
		}
		kept := lines[:len(lines)-1]
		if fmt.Sprint(len(in)-len(kept)) != m[1] || fmt.Sprint(len(in)) != m[2] {
			t.Errorf("budget %d: note %q for %d kept lines of %d", budget, m[0], len(kept), len(in))
		}
		// Every kept line is a whole input line, in the input's order.
		at := -1
		for _, l := range kept {
			k := slices.Index(in[at+1:], l)
			if k < 0 {
				t.Errorf("budget %d: %q is not a whole input line in order", budget, l)
				break
			}
			at += k + 1
		}
		if slices.Contains(kept, "the quick brown fox jumps over the lazy dog") {
			t.Errorf("budget %d: kept a line with nothing in it", budget)
		}
		if budget >= 70 && !slices.Contains(kept, "panic: runtime error: index out of range [3] with length 3") {
			t.Errorf("budget %d: the panic line was given up: %q", budget, out)
		}
	}
	// Enough for every line worth keeping: errors, paths, the first line
	// and decisions all stay, the rest goes.
	var important []string
	for _, l := range in {
		if !strings.HasPrefix(l, "the quick") && !strings.HasPrefix(l, "lorem") {
			important = append(important, l)
		}
	}
	loose := counter.Count(strings.Join(important, "\n")) + 20
	out := Extract(buildLog, loose, counter.Count)
	if strings.Contains(out, "lorem") || strings.Contains(out, "quick brown") {
		t.Errorf("budget %d kept lines with nothing in them:\n%s", loose, out)
	}
	for _, want := range []string{"go test ./...", "--- FAIL: TestLoad (0.00s)", "    load_test.go:42: want nats://nats:4222, got \"\"",
		"We decided to keep the envconfig prefix as RALPH.", "TODO: cover the OPENAI_ fallback"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("budget %d lost %q:\n%s", loose, want, out)
		}
	}
	// Tight budgets: errors first, and nothing of a lower class while an
	// error had to go.
	out = Extract(buildLog, 40, counter.Count)
	if strings.Contains(out, "TODO") || strings.Contains(out, "go test") || !strings.Contains(out, "FAIL") {
		t.Errorf("budget 40 should keep only errors:\n%s", out)
	}
	out = Extract(buildLog, 70, counter.Count)
	if !strings.Contains(out, "panic:") || !strings.Contains(out, "--- FAIL") || strings.Contains(out, "TODO") {
		t.Errorf("budget 70 should keep the errors, not the TODO:\n%s", out)
	}
}

func TestExtractEdges(t *testing.T) {
	if got := Extract(buildLog, 3, nil); got != "" {
		t.Errorf("budget below the note: %q", got)
	}
	long := strings.Repeat("error: x ", 500)
	out := Extract(long+"\nshort error line", 30, nil)
	if strings.Contains(out, long) || !strings.Contains(out, "short error line") {
		t.Errorf("a line too long for the budget must be left out whole: %q", out)
	}
}

// TestExtractErrorLinesByTheOneRule: the error lines Extract keeps first are
// the ones tools.ErrorLine goes by, whole words and not substrings: a
// refused connection is one, a traceback's header and a bare FAIL are not.
func TestExtractErrorLinesByTheOneRule(t *testing.T) {
	text := strings.Join([]string{
		"starting the integration suite",
		"Traceback (most recent call last):",
		"connection refused by db:5432",
		"FAIL",
		"refundCannotExceedCaptureFailsafe passed",
		strings.Repeat("lorem ipsum dolor sit amet ", 20),
	}, "\n")
	out := Extract(text, 30, nil)
	if !strings.Contains(out, "connection refused by db:5432\n") {
		t.Errorf("the refused connection was given up:\n%s", out)
	}
	for _, gone := range []string{"Traceback", "FAIL\n", "refundCannotExceedCaptureFailsafe"} {
		if strings.Contains(out, gone) {
			t.Errorf("kept %q, which names no error:\n%s", gone, out)
		}
	}
}
