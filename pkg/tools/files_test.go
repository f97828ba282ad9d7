package tools

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	root := w.Root()
	mustWrite(t, filepath.Join(root, "lines.txt"), "one\ntwo\nthree\nfour\n")
	mustWrite(t, filepath.Join(root, "bin.dat"), "abc\x00def")
	mustWrite(t, filepath.Join(root, "empty.txt"), "")

	t.Run("whole file", func(t *testing.T) {
		res := call(t, e, "read_file", map[string]any{"path": "sub/file.txt"})
		wantOK(t, res)
		if res.Output != "inside\n" || res.FilesChanged != nil {
			t.Errorf("%+v", res)
		}
	})
	t.Run("through inside symlink", func(t *testing.T) {
		res := call(t, e, "read_file", map[string]any{"path": "inlink"})
		wantOK(t, res)
		if res.Output != "inside\n" {
			t.Errorf("%q", res.Output)
		}
	})
	ranges := []struct {
		name string
		args map[string]any
		want string
	}{
		{"middle", map[string]any{"offset_line": 2, "limit_lines": 2}, "two\nthree\n"},
		{"offset to end", map[string]any{"offset_line": 3}, "three\nfour\n"},
		{"limit from start", map[string]any{"limit_lines": 1}, "one\n"},
		{"limit past end", map[string]any{"offset_line": 4, "limit_lines": 10}, "four\n"},
	}
	for _, r := range ranges {
		t.Run("range "+r.name, func(t *testing.T) {
			r.args["path"] = "lines.txt"
			res := call(t, e, "read_file", r.args)
			wantOK(t, res)
			if res.Output != r.want {
				t.Errorf("got %q, want %q", res.Output, r.want)
			}
		})
	}
	t.Run("range without final newline", func(t *testing.T) {
		mustWrite(t, filepath.Join(root, "nofinal.txt"), "x\ny")
		res := call(t, e, "read_file", map[string]any{"path": "nofinal.txt", "offset_line": 2})
		wantOK(t, res)
		if res.Output != "y" {
			t.Errorf("%q", res.Output)
		}
	})
	t.Run("empty file", func(t *testing.T) {
		res := call(t, e, "read_file", map[string]any{"path": "empty.txt"})
		wantOK(t, res)
		if res.Output != "" {
			t.Errorf("%q", res.Output)
		}
	})

	errs := []struct {
		name string
		args map[string]any
		want []string
	}{
		{"missing", map[string]any{"path": "nope.txt"}, []string{"read_file", `"nope.txt"`, "does not exist"}},
		{"directory", map[string]any{"path": "sub"}, []string{"read_file", `"sub"`, "directory"}},
		{"binary", map[string]any{"path": "bin.dat"}, []string{"read_file", `"bin.dat"`, "binary"}},
		{"escape", map[string]any{"path": "../outside/secret.txt"}, []string{"read_file", `"../outside/secret.txt"`, "escapes the workspace"}},
		{"symlink out", map[string]any{"path": "outlink"}, []string{"read_file", `"outlink"`, "escapes the workspace"}},
		{"absolute", map[string]any{"path": "/etc/passwd"}, []string{"read_file", "escapes the workspace"}},
		{"offset past end", map[string]any{"path": "lines.txt", "offset_line": 9}, []string{"read_file", "offset_line", "4 lines"}},
		{"offset zero", map[string]any{"path": "lines.txt", "offset_line": 0}, []string{"read_file", "offset_line"}},
		{"limit zero", map[string]any{"path": "lines.txt", "limit_lines": 0}, []string{"read_file", "limit_lines"}},
		{"empty path", map[string]any{"path": ""}, []string{"read_file", "path is empty"}},
	}
	for _, tt := range errs {
		t.Run("error "+tt.name, func(t *testing.T) {
			res := call(t, e, "read_file", tt.args)
			wantError(t, res, tt.want...)
			if strings.Contains(res.Output, "secret") {
				t.Errorf("leaked %q", res.Output)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	e, w, outside := newExec(t, Options{})
	root := w.Root()

	res := call(t, e, "write_file", map[string]any{"path": "new/dir/x.go", "content": "package x\n"})
	wantOK(t, res)
	if res.Output != "wrote 10 bytes to new/dir/x.go" {
		t.Errorf("output %q", res.Output)
	}
	if !slices.Equal(res.FilesChanged, []string{"new/dir/x.go"}) {
		t.Errorf("FilesChanged %v", res.FilesChanged)
	}
	if got := readFile(t, filepath.Join(root, "new/dir/x.go")); got != "package x\n" {
		t.Errorf("content %q", got)
	}

	// Overwrite keeps the mode of an existing executable.
	script := filepath.Join(root, "run.sh")
	mustWrite(t, script, "old")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	wantOK(t, call(t, e, "write_file", map[string]any{"path": "./run.sh", "content": "#!/bin/sh\n"}))
	if fi, _ := os.Stat(script); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi.Mode())
	}

	// Empty content is a valid file.
	res = call(t, e, "write_file", map[string]any{"path": "empty", "content": ""})
	wantOK(t, res)
	if res.Output != "wrote 0 bytes to empty" {
		t.Errorf("%q", res.Output)
	}

	// Writing through an inside symlink reports the file really written.
	res = call(t, e, "write_file", map[string]any{"path": "inlink", "content": "via link\n"})
	wantOK(t, res)
	if !slices.Equal(res.FilesChanged, []string{"sub/file.txt"}) || readFile(t, filepath.Join(root, "sub/file.txt")) != "via link\n" {
		t.Errorf("%+v", res)
	}

	wantError(t, call(t, e, "write_file", map[string]any{"path": "sub", "content": "x"}), "write_file", `"sub"`, "directory")
	wantError(t, call(t, e, "write_file", map[string]any{"path": "a.txt/child", "content": "x"}), "write_file", `"a.txt/child"`)

	escapes := []string{"../evil.txt", "outdir/evil.txt", "outlink", "dangle-out", "trick", "/tmp/evil.txt"}
	for _, p := range escapes {
		res := call(t, e, "write_file", map[string]any{"path": p, "content": "pwned"})
		wantError(t, res, "write_file", "escapes the workspace")
		if res.FilesChanged != nil {
			t.Errorf("%s: FilesChanged %v", p, res.FilesChanged)
		}
	}
	if readFile(t, filepath.Join(outside, "secret.txt")) != "secret\n" {
		t.Error("outside file modified")
	}
	for _, p := range []string{filepath.Join(outside, "evil.txt"), filepath.Join(outside, "nothing-yet"), filepath.Join(filepath.Dir(outside), "evil.txt"), filepath.Join(filepath.Dir(outside), "x")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created outside the workspace", p)
		}
	}
}

func TestEditFile(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	root := w.Root()
	path := filepath.Join(root, "main.go")
	mustWrite(t, path, "a := 1\nb := 1\nc := 2\n")

	res := call(t, e, "edit_file", map[string]any{"path": "main.go", "old": "c := 2", "new": "c := 3"})
	wantOK(t, res)
	if res.Output != "replaced 1 occurrence in main.go" || !slices.Equal(res.FilesChanged, []string{"main.go"}) {
		t.Errorf("%+v", res)
	}
	if got := readFile(t, path); got != "a := 1\nb := 1\nc := 3\n" {
		t.Errorf("content %q", got)
	}

	res = call(t, e, "edit_file", map[string]any{"path": "main.go", "old": ":= 1", "new": ":= 9"})
	wantError(t, res, "edit_file", `"old"`, "2 times", "replace_all")
	if res.FilesChanged != nil || readFile(t, path) != "a := 1\nb := 1\nc := 3\n" {
		t.Error("ambiguous edit changed the file")
	}

	res = call(t, e, "edit_file", map[string]any{"path": "main.go", "old": ":= 1", "new": ":= 9", "replace_all": true})
	wantOK(t, res)
	if res.Output != "replaced 2 occurrences in main.go" || readFile(t, path) != "a := 9\nb := 9\nc := 3\n" {
		t.Errorf("%+v %q", res, readFile(t, path))
	}

	errs := []struct {
		name string
		args map[string]any
		want []string
	}{
		{"not found", map[string]any{"path": "main.go", "old": "zzz", "new": "y"}, []string{"edit_file", `"old"`, "not found", `"main.go"`}},
		{"empty old", map[string]any{"path": "main.go", "old": "", "new": "y"}, []string{"edit_file", `"old"`, "empty"}},
		{"identical", map[string]any{"path": "main.go", "old": "a", "new": "a"}, []string{"edit_file", "identical"}},
		{"missing file", map[string]any{"path": "nope.go", "old": "a", "new": "b"}, []string{"edit_file", `"nope.go"`, "does not exist"}},
		{"escape", map[string]any{"path": "outlink", "old": "secret", "new": "x"}, []string{"edit_file", `"outlink"`, "escapes the workspace"}},
		{"missing new", map[string]any{"path": "main.go", "old": "a"}, []string{"edit_file", `"new" is required`}},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, call(t, e, "edit_file", tt.args), tt.want...)
		})
	}
}

func TestListDir(t *testing.T) {
	e, w, _ := newExec(t, Options{})
	root := w.Root()
	mustWrite(t, filepath.Join(root, "pkg", "b.go"), "")
	mustWrite(t, filepath.Join(root, "pkg", "a.go"), "")
	mustWrite(t, filepath.Join(root, "pkg", "z", "deep.go"), "")
	mustWrite(t, filepath.Join(root, "pkg", ".git", "HEAD"), "")
	mustWrite(t, filepath.Join(root, ".git", "HEAD"), "")
	mustMkdir(t, filepath.Join(root, "emptydir"))

	res := call(t, e, "list_dir", map[string]any{"path": "pkg"})
	wantOK(t, res)
	if res.Output != "a.go\nb.go\nz/" {
		t.Errorf("got %q", res.Output)
	}

	res = call(t, e, "list_dir", map[string]any{})
	wantOK(t, res)
	lines := strings.Split(res.Output, "\n")
	if !slices.IsSorted(lines) || !slices.Contains(lines, "sub/") || !slices.Contains(lines, "a.txt") ||
		!slices.Contains(lines, "indir/") || slices.Contains(lines, ".git/") {
		t.Errorf("got %q", res.Output)
	}

	res = call(t, e, "list_dir", map[string]any{"path": "emptydir"})
	wantOK(t, res)
	if !strings.Contains(res.Output, "empty") {
		t.Errorf("got %q", res.Output)
	}

	wantError(t, call(t, e, "list_dir", map[string]any{"path": "a.txt"}), "list_dir", `"a.txt"`, "not a directory")
	wantError(t, call(t, e, "list_dir", map[string]any{"path": "nope"}), "list_dir", `"nope"`, "does not exist")
	wantError(t, call(t, e, "list_dir", map[string]any{"path": "outdir"}), "list_dir", `"outdir"`, "escapes the workspace")
	wantError(t, call(t, e, "list_dir", map[string]any{"path": ".."}), "list_dir", "escapes the workspace")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
