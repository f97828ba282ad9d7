package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemoryBench(t *testing.T) {
	out := filepath.Join(t.TempDir(), "docs", "memory-benchmark.md")
	stdout, code, err := ralph(t, "memory", "bench", "--tasks", "3", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, stdout)
	}
	for _, s := range []string{"memory off", "memory on", "iterations per task", "report written to " + out} {
		if !strings.Contains(stdout, s) {
			t.Fatalf("output lacks %q:\n%s", s, stdout)
		}
	}
	found := false
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) == 5 && strings.Join(f, " ") == "builder iterations 12 8 0.67" {
			found = true
		}
	}
	if !found {
		t.Errorf("no line says 12 iterations without memory and 8 with it:\n%s", stdout)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(md), "# Memory benchmark") || !strings.Contains(string(md), "| builder iterations | 12 | 8 | 0.67 |") {
		t.Fatalf("markdown report:\n%s", md)
	}
}

func TestMemoryBenchBadInput(t *testing.T) {
	for _, args := range [][]string{{"--tasks", "1"}, {"--tasks", "51"}, {"extra"}, {"--window", "8"}} {
		out, code, _ := ralph(t, append([]string{"memory", "bench"}, args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", args, code, out)
		}
	}
	if _, _, err := ralph(t, "memory", "bench", "--tasks", "1"); err == nil || !strings.Contains(err.Error(), "--tasks 1: must be between 2 and 50") {
		t.Errorf("the error does not say what is wrong: %v", err)
	}
}
