package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
)

const onePRD = "title: Add the API (v2)\ntasks:\n  - {id: T1, title: x, acceptance_criteria: [y]}\n"

func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// prepare is prepareSession with the default settings; it returns the
// session's git and the exit code of its error (0 without one).
func prepare(t *testing.T, prdPath, ws string, gf gitFlags) (*events.Git, int, error) {
	t.Helper()
	cfg, err := config.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	env, err := prepareSession(context.Background(), cfg, prdPath, ws, "s-1", gf)
	if err != nil {
		var ee exitError
		if !errors.As(err, &ee) {
			return nil, 1, err
		}
		return nil, ee.code, err
	}
	d, err := events.DecodeAs[events.SessionStartedData](env)
	if err != nil {
		t.Fatal(err)
	}
	return d.Git, 0, nil
}

func TestRunNeedsACleanRepositoryTopLevel(t *testing.T) {
	prdPath := writeFile(t, t.TempDir(), "prd.yaml", onePRD)
	cases := []struct {
		name string
		ws   func() string
		gf   gitFlags
		want []string
	}{
		{"not a repository", func() string { return t.TempDir() }, gitFlags{}, []string{"is not a git repository", "git init"}},
		{"a subdirectory", func() string {
			ws := gitWorkspace(t)
			sub := filepath.Join(ws, "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			return sub
		}, gitFlags{}, []string{"not the top level", "give the repository's top level"}},
		{"no commit yet", func() string {
			ws := t.TempDir()
			gitRun(t, ws, "init", "-q")
			return ws
		}, gitFlags{}, []string{"no commit yet"}},
		{"a dirty work tree", func() string {
			ws := gitWorkspace(t)
			writeFile(t, ws, "README.md", "changed\n")
			writeFile(t, ws, "new.txt", "x\n")
			return ws
		}, gitFlags{}, []string{"uncommitted changes (M README.md, ?? new.txt)", "--allow-dirty"}},
		{"a remote that is not there", func() string { return gitWorkspace(t) }, gitFlags{push: "origin"}, []string{"--push origin", "no such remote"}},
		{"a remote that is no name", func() string { return gitWorkspace(t) }, gitFlags{push: "--upload-pack=x"}, []string{"--push", "configured remote"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, code, err := prepare(t, prdPath, c.ws(), c.gf)
			if code != 2 {
				t.Fatalf("exit %d (%v), want 2", code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestRunTakesTheBranchFromThePRD(t *testing.T) {
	ws := gitWorkspace(t)
	g, code, err := prepare(t, writeFile(t, t.TempDir(), "prd.yaml", onePRD), ws, gitFlags{})
	if code != 0 || g == nil || g.Branch != "ralph/add-the-api-v2" || g.PRDFile != "" {
		t.Fatalf("git %+v, exit %d, %v; want branch ralph/<slug of the title>", g, code, err)
	}
	named := writeFile(t, t.TempDir(), "prd.yaml", "branch_name: feature/x\n"+onePRD)
	if g, _, err := prepare(t, named, ws, gitFlags{}); err != nil || g.Branch != "feature/x" {
		t.Fatalf("git %+v, %v; want the PRD's branch_name", g, err)
	}
	// Dirty, but allowed; an untracked progress.txt is the session's own.
	writeFile(t, ws, "progress.txt", "notes\n")
	if _, code, err := prepare(t, named, ws, gitFlags{}); code != 0 {
		t.Fatalf("progress.txt alone counts as dirty: %v", err)
	}
	writeFile(t, ws, "other.txt", "x\n")
	if g, code, err := prepare(t, named, ws, gitFlags{allowDirty: true}); code != 0 || g.Branch != "feature/x" {
		t.Fatalf("--allow-dirty: exit %d, %v", code, err)
	}
	bad := writeFile(t, t.TempDir(), "prd.yaml", "branch_name: -x\n"+onePRD)
	if _, code, err := prepare(t, bad, ws, gitFlags{}); code != 2 || !strings.Contains(err.Error(), "branch_name") {
		t.Fatalf("a bad branch name: exit %d, %v", code, err)
	}
}

const ralphPRD = `{"project": "Todo", "branchName": "ralph/todo", "userStories": [
  {"id": "US-1", "title": "One", "acceptanceCriteria": ["a"], "priority": 2, "passes": false},
  {"id": "US-2", "title": "Two", "acceptanceCriteria": ["b"], "priority": 1, "passes": true}]}
`

func TestRunWritesBackOnlyToAPRDJSONInTheWorkspace(t *testing.T) {
	ws := gitWorkspace(t)
	// Untracked in the workspace: it is committed with the first story.
	in := writeFile(t, ws, "prd.json", ralphPRD)
	g, code, err := prepare(t, in, ws, gitFlags{})
	if code != 0 || g.Branch != "ralph/todo" || g.PRDFile != "prd.json" {
		t.Fatalf("git %+v, exit %d, %v", g, code, err)
	}
	out := writeFile(t, t.TempDir(), "prd.json", ralphPRD)
	if _, code, err := prepare(t, out, ws, gitFlags{}); code != 2 || !strings.Contains(err.Error(), "outside the workspace") {
		t.Fatalf("a prd.json outside the workspace: exit %d, %v", code, err)
	}
	all := writeFile(t, ws, "prd.json", strings.ReplaceAll(ralphPRD, `"passes": false`, `"passes": true`))
	if _, code, err := prepare(t, all, ws, gitFlags{}); code != 2 || !strings.Contains(err.Error(), "every story passes already") {
		t.Fatalf("nothing to run: exit %d, %v", code, err)
	}
}

func TestPRDCheckPrintsThePlan(t *testing.T) {
	path := writeFile(t, t.TempDir(), "prd.json", ralphPRD)
	out, code, err := ralph(t, "prd", "check", path)
	if code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	for _, want := range []string{"valid Ralph prd.json \"Todo\"", "branch: ralph/todo", "run order (1 task(s)):\n  1. US-1: One (priority 2)", "skipped, passes already (1):\n  - US-2: Two"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	bad := writeFile(t, t.TempDir(), "bad.json", `{"userStories": [{"id": "US-1", "title": "One", "acceptanceCriteria": ["a"], "priority": "high"}]}`)
	if _, code, err := ralph(t, "prd", "check", bad); code != 2 || !strings.Contains(err.Error(), `line 1, column 90: story "US-1": field priority`) {
		t.Fatalf("bad prd.json: exit %d, %v", code, err)
	}
	yaml := writeFile(t, t.TempDir(), "p.yaml", onePRD)
	if out, code, _ := ralph(t, "prd", "check", yaml); code != 0 || !strings.Contains(out, "branch: ralph/add-the-api-v2") {
		t.Fatalf("yaml: exit %d\n%s", code, out)
	}
}
