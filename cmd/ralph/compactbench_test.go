package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompactBench(t *testing.T) {
	out := filepath.Join(t.TempDir(), "docs", "compaction-benchmark.md")
	stdout, code, err := ralph(t, "compact", "bench", "--out", out)
	// Exit 1 means a tiered_adaptive target was missed, and only that.
	want := 0
	if strings.Contains(stdout, "FAIL  ") {
		want = 1
	}
	if code != want {
		t.Fatalf("exit %d (want %d): %v\n%s", code, want, err, stdout)
	}
	for _, s := range []string{"none", "truncation", "legacy", "tiered", "tiered_adaptive", "tiered_adaptive targets:", "report written to " + out} {
		if !strings.Contains(stdout, s) {
			t.Fatalf("output lacks %q:\n%s", s, stdout)
		}
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(md), "# Compaction benchmark") || !strings.Contains(string(md), "| tiered_adaptive |") {
		t.Fatalf("markdown report:\n%s", md)
	}
}

func TestCompactBenchBadInput(t *testing.T) {
	if _, code, _ := ralph(t, "compact", "bench", "extra"); code != 2 {
		t.Fatalf("an argument: exit %d, want 2", code)
	}
	if _, code, _ := ralph(t, "compact", "bench", "--window", "8"); code != 2 {
		t.Fatalf("an unknown flag: exit %d, want 2", code)
	}
}
