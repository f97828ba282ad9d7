package tools

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestSearch(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	root := w.Root()
	mustWrite(t, filepath.Join(root, "main.go"), "package main\n\nfunc main() {\n\tTODO()\n}\n")
	mustWrite(t, filepath.Join(root, "pkg", "x.go"), "// TODO: tidy\r\nvar x = 1\n")
	mustWrite(t, filepath.Join(root, ".git", "config"), "TODO in git\n")
	mustWrite(t, filepath.Join(root, "blob.bin"), "TODO\x00binary\n")
	mustWrite(t, filepath.Join(root, "late.bin"), "TODO first\n"+strings.Repeat("x\n", 100)+"\x00\n")

	res := call(t, e, "search", map[string]any{"pattern": `TODO`})
	wantOK(t, res)
	want := "main.go:4: \tTODO()\npkg/x.go:1: // TODO: tidy"
	if res.Output != want {
		t.Errorf("got %q, want %q", res.Output, want)
	}

	res = call(t, e, "search", map[string]any{"pattern": `TODO`, "path": "pkg"})
	wantOK(t, res)
	if res.Output != "pkg/x.go:1: // TODO: tidy" {
		t.Errorf("path dir: %q", res.Output)
	}
	res = call(t, e, "search", map[string]any{"pattern": `^func`, "path": "main.go"})
	wantOK(t, res)
	if res.Output != "main.go:3: func main() {" {
		t.Errorf("path file: %q", res.Output)
	}

	// A symlink out of the workspace is not followed while walking.
	res = call(t, e, "search", map[string]any{"pattern": `secret`})
	wantOK(t, res)
	if strings.Contains(res.Output, "secret\n") || strings.Contains(res.Output, ":1: secret") {
		t.Errorf("searched outside: %q", res.Output)
	}
	if !strings.Contains(res.Output, "no matches") {
		t.Errorf("got %q", res.Output)
	}

	wantError(t, call(t, e, "search", map[string]any{"pattern": `a(`}), "search", `"pattern"`, `"a("`, "regular expression")
	wantError(t, call(t, e, "search", map[string]any{"pattern": `x`, "path": "outdir"}), "search", "escapes the workspace")
	wantError(t, call(t, e, "search", map[string]any{"pattern": `x`, "path": "nope"}), "search", `"nope"`, "does not exist")
	wantError(t, call(t, e, "search", map[string]any{"pattern": `x`, "max_results": 0}), "search", "max_results")
}

func TestSearchMaxResults(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "hit %d\n", i)
	}
	mustWrite(t, filepath.Join(w.Root(), "many.txt"), b.String())

	res := call(t, e, "search", map[string]any{"pattern": `^hit`, "max_results": 5})
	wantOK(t, res)
	lines := strings.Split(res.Output, "\n")
	if len(lines) != 6 || lines[0] != "many.txt:1: hit 0" || lines[4] != "many.txt:5: hit 4" || !strings.Contains(lines[5], "max_results=5") {
		t.Errorf("got %q", res.Output)
	}

	// Exactly max_results matches is not truncation.
	res = call(t, e, "search", map[string]any{"pattern": `^hit`, "max_results": 20})
	wantOK(t, res)
	if strings.Contains(res.Output, "max_results") || strings.Count(res.Output, "\n") != 19 {
		t.Errorf("got %q", res.Output)
	}
}

func TestSearchLongLineIsShortened(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	mustWrite(t, filepath.Join(w.Root(), "min.js"), "needle"+strings.Repeat("x", 5000)+"\n")
	res := call(t, e, "search", map[string]any{"pattern": `needle`})
	wantOK(t, res)
	if len(res.Output) > maxMatchText+50 || !strings.HasPrefix(res.Output, "min.js:1: needle") {
		t.Errorf("len %d: %.80q", len(res.Output), res.Output)
	}
}
