package tools

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// newTree returns a workspace with a small tree and a sibling directory
// outside it that the symlinks below try to reach.
func newTree(t *testing.T) (*Workspace, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	mustMkdir(t, filepath.Join(root, "sub"))
	mustMkdir(t, outside)
	mustWrite(t, filepath.Join(root, "a.txt"), "a\n")
	mustWrite(t, filepath.Join(root, "sub", "file.txt"), "inside\n")
	mustWrite(t, filepath.Join(outside, "secret.txt"), "secret\n")
	mustSymlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(root, "outlink"))
	mustSymlink(t, outside, filepath.Join(root, "outdir"))
	mustSymlink(t, "sub/file.txt", filepath.Join(root, "inlink"))
	mustSymlink(t, "sub", filepath.Join(root, "indir"))
	mustSymlink(t, filepath.Join(outside, "nothing-yet"), filepath.Join(root, "dangle-out"))
	mustSymlink(t, "new-inside.txt", filepath.Join(root, "dangle-in"))
	// Lexically "outdir/../x" is ws/x, but the kernel follows outdir first
	// and lands next to the outside directory.
	mustSymlink(t, "outdir/../x", filepath.Join(root, "trick"))
	mustSymlink(t, "loop2", filepath.Join(root, "loop1"))
	mustSymlink(t, "loop1", filepath.Join(root, "loop2"))
	w, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	return w, outside
}

func TestResolve(t *testing.T) {
	w, _ := newTree(t)
	root := w.Root()
	tests := []struct {
		name   string
		path   string
		want   string // expected result relative to root, when ok
		escape bool   // error must wrap ErrPathEscape
		err    bool   // some other error
	}{
		{name: "relative file", path: "a.txt", want: "a.txt"},
		{name: "dot", path: ".", want: "."},
		{name: "dot segments inside", path: "./sub/../a.txt", want: "a.txt"},
		{name: "nested new file", path: "new/deeper/file.go", want: "new/deeper/file.go"},
		{name: "name starting with dots", path: "..foo", want: "..foo"},
		{name: "symlink inside to inside", path: "inlink", want: "sub/file.txt"},
		{name: "through symlinked dir inside", path: "indir/new.txt", want: "sub/new.txt"},
		{name: "dangling symlink to inside", path: "dangle-in", want: "new-inside.txt"},
		{name: "empty", path: "", err: true},
		{name: "dotdot", path: "..", escape: true},
		{name: "dotdot prefix", path: "../etc/passwd", escape: true},
		{name: "climbs out after a dir", path: "a/../../x", escape: true},
		{name: "absolute", path: "/etc/passwd", escape: true},
		{name: "absolute inside root", path: filepath.Join(root, "a.txt"), escape: true},
		{name: "symlink file out", path: "outlink", escape: true},
		{name: "symlink dir out", path: "outdir/secret.txt", escape: true},
		{name: "new file through symlink dir out", path: "outdir/new.txt", escape: true},
		{name: "symlink dir itself out", path: "outdir", escape: true},
		{name: "dangling symlink out", path: "dangle-out", escape: true},
		{name: "symlink with dotdot after linked dir", path: "trick", escape: true},
		{name: "symlink loop", path: "loop1", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := w.Resolve(tt.path)
			switch {
			case tt.escape:
				if !errors.Is(err, ErrPathEscape) {
					t.Fatalf("Resolve(%q) = %q, %v; want ErrPathEscape", tt.path, got, err)
				}
			case tt.err:
				if err == nil || errors.Is(err, ErrPathEscape) {
					t.Fatalf("Resolve(%q) = %q, %v; want a non-escape error", tt.path, got, err)
				}
			default:
				if err != nil {
					t.Fatalf("Resolve(%q): %v", tt.path, err)
				}
				if want := filepath.Join(root, tt.want); got != want {
					t.Fatalf("Resolve(%q) = %q, want %q", tt.path, got, want)
				}
			}
		})
	}
}

func TestResolveErrorNamesPath(t *testing.T) {
	w, _ := newTree(t)
	_, err := w.Resolve("../etc/passwd")
	if err == nil || err.Error() != `path "../etc/passwd" escapes the workspace` {
		t.Fatalf("err = %v", err)
	}
}

func TestNewWorkspace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	mustWrite(t, file, "x")
	if _, err := NewWorkspace(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing root accepted")
	}
	if _, err := NewWorkspace(file); err == nil {
		t.Error("file root accepted")
	}
	link := filepath.Join(t.TempDir(), "link")
	mustSymlink(t, dir, link)
	w, err := NewWorkspace(link)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if w.Root() != real {
		t.Errorf("Root() = %q, want symlink-free %q", w.Root(), real)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
