package tools

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// nextCallRE finds the call a page ends with.
var nextCallRE = regexp.MustCompile(`read the next page with (\w+) (\{.*\})\]$`)

// readAll follows the pages of a read from its first call to the last,
// checking each page, and returns the text the pages hold together.
func readAll(t *testing.T, e *Executor, tool, args string, pageBytes int, size string) (string, int) {
	t.Helper()
	var b strings.Builder
	pages := 0
	for {
		res := call(t, e, tool, args)
		wantOK(t, res)
		pages++
		if len(res.Output) > pageBytes {
			t.Fatalf("page %d is %d bytes, over the page of %d", pages, len(res.Output), pageBytes)
		}
		body, last := res.Output, ""
		if i := strings.LastIndex(res.Output, "\n["); i >= 0 && strings.HasSuffix(res.Output, "]") {
			body, last = res.Output[:i+1], res.Output[i+1:]
		}
		for _, l := range strings.SplitAfter(body, "\n") {
			if l != "" && !strings.HasSuffix(l, "|end\n") {
				t.Fatalf("page %d cuts a line: %q", pages, l)
			}
		}
		b.WriteString(body)
		m := nextCallRE.FindStringSubmatch(last)
		if m == nil {
			return b.String(), pages
		}
		if !strings.Contains(last, size) {
			t.Fatalf("page %d does not give the size %q: %q", pages, size, last)
		}
		if m[1] != tool {
			t.Fatalf("next page by %s, want %s", m[1], tool)
		}
		args = m[2]
		if pages > 1000 {
			t.Fatal("the pages do not end")
		}
	}
}

// text is n lines of varied length, each ending in "|end".
func text(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d %s|end\n", i+1, strings.Repeat("x", i%120))
	}
	return b.String()
}

func TestReadFilePages(t *testing.T) {
	const pageBytes = 16384
	e, w, _ := newExec(t, Options{PageBytes: pageBytes})
	big := text(20000) // about 1.3 MB
	mustWrite(t, filepath.Join(w.Root(), "big.log"), big)
	size := fmt.Sprintf("big.log is %d bytes in 20000 lines", len(big))

	t.Run("the whole file, page by page", func(t *testing.T) {
		got, pages := readAll(t, e, ReadFile, `{"path": "big.log"}`, pageBytes, size)
		if got != big {
			t.Fatalf("the pages hold %d bytes, not the file's %d", len(got), len(big))
		}
		if pages < len(big)/pageBytes {
			t.Fatalf("%d pages for %d bytes", pages, len(big))
		}
	})
	t.Run("a range larger than a page", func(t *testing.T) {
		lines := strings.SplitAfter(big, "\n")
		want := strings.Join(lines[99:5099], "")
		got, _ := readAll(t, e, ReadFile, `{"path": "big.log", "offset_line": 100, "limit_lines": 5000}`, pageBytes, size)
		if got != want {
			t.Fatalf("the pages of lines 100-5099 hold %d bytes, want %d", len(got), len(want))
		}
	})
	t.Run("a range that fits is returned as asked", func(t *testing.T) {
		res := call(t, e, ReadFile, map[string]any{"path": "big.log", "offset_line": 3, "limit_lines": 2})
		if res.Output != "3 xx|end\n4 xxx|end\n" {
			t.Fatalf("%q", res.Output)
		}
	})
	t.Run("the first page says where it is", func(t *testing.T) {
		res := call(t, e, ReadFile, map[string]any{"path": "big.log"})
		if !strings.Contains(res.Output, "["+size+"; this page holds lines 1-") ||
			!strings.Contains(res.Output, `read the next page with read_file {"path": "big.log", "offset_line": `) {
			t.Fatalf("first page ends %q", res.Output[len(res.Output)-300:])
		}
	})
	t.Run("a line longer than a page is not cut", func(t *testing.T) {
		long := "short|end\n" + strings.Repeat("y", 3*pageBytes) + "\nafter|end\n"
		mustWrite(t, filepath.Join(w.Root(), "min.js"), long)
		res := call(t, e, ReadFile, map[string]any{"path": "min.js", "offset_line": 2})
		wantOK(t, res)
		if strings.Contains(res.Output, "yyyy") || !strings.Contains(res.Output, "line 2 is 49153 bytes, longer than a page (16384 bytes)") ||
			!strings.Contains(res.Output, "sed -n '2p' 'min.js' | cut -c 1-2000") ||
			!strings.Contains(res.Output, `read_file {"path": "min.js", "offset_line": 3} reads on from the next line`) {
			t.Fatalf("%q", res.Output)
		}
		first := call(t, e, ReadFile, map[string]any{"path": "min.js"})
		if !strings.HasPrefix(first.Output, "short|end\n[min.js is ") || strings.Contains(first.Output, "yyyy") {
			t.Fatalf("first page %q", first.Output)
		}
	})
	t.Run("a small file is returned whole, as before", func(t *testing.T) {
		mustWrite(t, filepath.Join(w.Root(), "small.txt"), "one\ntwo\n")
		if res := call(t, e, ReadFile, map[string]any{"path": "small.txt"}); res.Output != "one\ntwo\n" {
			t.Fatalf("%q", res.Output)
		}
	})
}

func TestReadArtifactPages(t *testing.T) {
	const pageBytes = 4096
	w, _ := newTree(t)
	big := text(3000)
	e := NewExecutor(w, &fakeArtifacts{items: map[string]string{"a-1": big}}, Options{PageBytes: pageBytes})
	got, pages := readAll(t, e, ReadArtifact, `{"id": "a-1"}`, pageBytes, fmt.Sprintf("artifact a-1 is %d bytes in 3000 lines", len(big)))
	if got != big || pages < 2 {
		t.Fatalf("%d pages hold %d bytes, want the artifact's %d", pages, len(got), len(big))
	}
	wantError(t, call(t, e, ReadArtifact, map[string]any{"id": "a-1", "offset_line": 5000}), "read_artifact", "offset_line", "3000 lines")
	wantError(t, call(t, e, ReadArtifact, map[string]any{"id": "a-1", "limit_lines": 0}), "read_artifact", "limit_lines")
}
