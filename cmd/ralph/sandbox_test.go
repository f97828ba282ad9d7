package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/internal/sandboxtest"
)

func TestMain(m *testing.M) {
	if err := sandboxtest.Usable(); err != nil && !sandboxtest.InCI() {
		// The commands under test are about other things; CI runs them
		// sandboxed.
		fmt.Fprintf(os.Stderr, "bubblewrap does not work here (%v): these tests run the agent's commands with RALPH_SANDBOX_MODE=none\n", err)
		os.Setenv("RALPH_SANDBOX_MODE", "none")
	}
	os.Exit(m.Run())
}

// A sandbox that does not work stops every command that would run the
// builder or the critic, with exit 2 and the setting that opts out.
func TestBrokenSandboxRefusesToStart(t *testing.T) {
	upEnv(t)
	t.Setenv("RALPH_SANDBOX_MODE", "bwrap")
	// Nothing of the system in the sandbox: not even `true` can run.
	t.Setenv("RALPH_SANDBOX_READ_ONLY", "/nonexistent-ralph-test-dir")
	dir := gitWorkspace(t)
	prd := writeFile(t, dir, "prd.yaml", "tasks:\n  - {id: T1, title: x, acceptance_criteria: [y]}\n")
	for _, args := range [][]string{
		{"up"},
		{"run", prd, "--workspace", dir},
		{"demo"},
	} {
		t.Run(args[0], func(t *testing.T) {
			_, code, err := ralph(t, args...)
			if code != 2 || err == nil {
				t.Fatalf("exit %d (%v), want 2", code, err)
			}
			for _, want := range []string{"sandbox is not available", "RALPH_SANDBOX_MODE=none"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}
