package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

// demoDirs lists what the demo left in dir.
func demoDirs(t *testing.T, dir string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, "ralph-demo-*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// The demo runs as many tasks as its help says, and leaves no temporary
// directory behind.
func TestDemoMatchesItsHelpAndCleansUp(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	out, code, err := ralph(t, "demo", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	started := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var env events.Envelope
		if err := json.Unmarshal([]byte(line), &env); err != nil {
			t.Fatalf("not an event: %q", line)
		}
		if env.Type == events.TaskStarted {
			started++
		}
	}
	help, _, _ := ralph(t, "demo", "--help")
	if want := fmt.Sprintf("Run a %d-task session", started); started == 0 || !strings.Contains(help, want) {
		t.Fatalf("the demo started %d tasks; its help does not say %q:\n%s", started, want, help)
	}
	if left := demoDirs(t, tmp); len(left) != 0 {
		t.Fatalf("the demo left %v behind", left)
	}
}

// With --keep the workspace and the PRD stay, where the demo says.
func TestDemoKeep(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	out, code, err := ralph(t, "demo", "--keep")
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	left := demoDirs(t, tmp)
	if len(left) != 1 {
		t.Fatalf("demo directories after --keep: %v", left)
	}
	if !strings.Contains(out, "stay in "+left[0]) || !strings.Contains(out, "run "+filepath.Join(left[0], "prd.yaml")+" --workspace") {
		t.Fatalf("output does not say where the demo was kept (%s):\n%s", left[0], out)
	}
	for _, f := range []string{"prd.yaml", "workspace/greeting.txt", "workspace/NOTES.md", "workspace/progress.txt"} {
		if _, err := os.Stat(filepath.Join(left[0], f)); err != nil {
			t.Errorf("kept demo lacks %s: %v", f, err)
		}
	}
	// The work product: one commit per task on the session's branch, as
	// git log shows it and as the summary lists it.
	for _, want := range []string{"git log --oneline ralph/ralph-mesh-demo:\n", " T1: Greeting file\n", " T3: Release notes\n", " initial commit\n",
		"commits on branch ralph/ralph-mesh-demo: 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}
