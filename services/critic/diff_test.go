package critic

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@x", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// The critic reviews the task's diff, from the commit the task began at to
// the work tree: work committed since (a subtask's), changes not yet
// committed and new files, whole, within the bound.
func TestReviewPromptShowsTheTasksDiff(t *testing.T) {
	ws := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, ws, "init", "-q")
	write("main.go", "package main\n\nfunc main() {}\n")
	gitIn(t, ws, "add", "-A")
	gitIn(t, ws, "commit", "-q", "-m", "start")
	base := gitIn(t, ws, "rev-parse", "HEAD")
	write("sub.go", "package main\n\nconst fromSubtask = 1\n")
	gitIn(t, ws, "add", "-A")
	gitIn(t, ws, "commit", "-q", "-m", "T1.1: subtask")
	write("main.go", "package main\n\nfunc main() { println(fromSubtask) }\n")
	write("notes.md", "new file\n")
	write("huge.txt", strings.Repeat("line of a large file\n", 100))

	s := New(Deps{Config: Config{MaxFileBytes: 50, MaxDiffBytes: 1200}})
	req := events.CritiqueRequestedData{Task: prd.Task{ID: "T1", Title: "t", AcceptanceCriteria: []string{"a"}}, Workspace: ws}
	prompt := s.reviewPrompt(context.Background(), req, base, nil)
	for _, want := range []string{
		"from commit " + base[:12] + " (where the task began) to the work tree, 4 file(s)",
		"+const fromSubtask = 1",
		"-func main() {}\n+func main() { println(fromSubtask) }",
		"+++ b/notes.md\n@@ -0,0 +1,1 @@\n+new file",
		"Not shown, past the diff's bound of 1200 bytes: huge.txt (new, 2100 bytes)",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
	if strings.Contains(prompt, "line of a large file") {
		t.Error("part of a file past the bound is shown")
	}
	// Without a base (a session without a branch) there is no diff.
	if p := s.reviewPrompt(context.Background(), req, "", nil); strings.Contains(p, "diff") {
		t.Errorf("a diff without a base:\n%s", p)
	}
	if p := s.reviewPrompt(context.Background(), req, "0000000000000000000000000000000000000000", nil); !strings.Contains(p, "could not be read") {
		t.Errorf("a base that is no commit:\n%s", p)
	}
}
