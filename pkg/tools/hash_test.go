package tools

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestHash(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a.go"), "package a\n")
	mustWrite(t, filepath.Join(root, "dir", "b.go"), "package b\n")
	mustWrite(t, filepath.Join(root, ".git", "HEAD"), "ref: refs/heads/main\n")

	h1 := mustHash(t, root)
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(h1) {
		t.Fatalf("bad format %q", h1)
	}
	if h2 := mustHash(t, root); h2 != h1 {
		t.Fatalf("unstable: %s then %s", h1, h2)
	}

	// .git churn is not a change to the work.
	mustWrite(t, filepath.Join(root, ".git", "HEAD"), "ref: refs/heads/other\n")
	mustWrite(t, filepath.Join(root, ".git", "index"), "binary index")
	if h := mustHash(t, root); h != h1 {
		t.Errorf(".git change altered the hash")
	}

	// Empty directories are not content.
	mustMkdir(t, filepath.Join(root, "empty"))
	if h := mustHash(t, root); h != h1 {
		t.Errorf("empty dir altered the hash")
	}

	mustWrite(t, filepath.Join(root, "dir", "b.go"), "package b // changed\n")
	h3 := mustHash(t, root)
	if h3 == h1 {
		t.Fatal("content change not detected")
	}

	// Same bytes under another name is a different workspace.
	if err := os.Rename(filepath.Join(root, "a.go"), filepath.Join(root, "c.go")); err != nil {
		t.Fatal(err)
	}
	if h := mustHash(t, root); h == h3 {
		t.Error("rename not detected")
	}

	// A symlinked root hashes like the real one.
	link := filepath.Join(t.TempDir(), "link")
	mustSymlink(t, root, link)
	if mustHash(t, link) != mustHash(t, root) {
		t.Error("symlinked root hashes differently")
	}

	if _, err := Hash(filepath.Join(root, "missing")); err == nil {
		t.Error("missing root hashed")
	}
}

func TestHashIndependentOfCreationOrder(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	mustWrite(t, filepath.Join(a, "x", "1"), "one")
	mustWrite(t, filepath.Join(a, "x.txt"), "two")
	mustWrite(t, filepath.Join(b, "x.txt"), "two")
	mustWrite(t, filepath.Join(b, "x", "1"), "one")
	if mustHash(t, a) != mustHash(t, b) {
		t.Error("same files, different hash")
	}
}

func mustHash(t *testing.T, root string) string {
	t.Helper()
	h, err := Hash(root)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
