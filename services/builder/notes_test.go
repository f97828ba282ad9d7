package builder

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/sandbox"
)

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@x", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

const storiesJSON = `{"userStories": [
  {"id": "US-1", "title": "One", "acceptanceCriteria": ["a"], "passes": false, "extra": [1, 2]}
]}
`

// committer is a builder shell that only commits, and a repository on
// branch ralph/x with a prd.json, and the plan of US-1's commit.
func committer(t *testing.T) (*Service, string, CommitPlan) {
	t.Helper()
	ws := t.TempDir()
	gitT(t, ws, "init", "-q")
	if err := os.WriteFile(filepath.Join(ws, "prd.json"), []byte(storiesJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, ws, "add", "-A")
	gitT(t, ws, "commit", "-q", "-m", "start")
	gitT(t, ws, "switch", "-q", "-c", "ralph/x")
	if err := os.WriteFile(filepath.Join(ws, "one.txt"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := New(Deps{Log: zap.NewNop(), Sandbox: sandbox.Unconfined(), Config: Config{Git: gitwork.Config{AuthorName: "R", AuthorEmail: "r@x"}}})
	plan := CommitPlan{Session: "s1", Workspace: ws, Step: 4, TaskID: "US-1", Base: gitT(t, ws, "rev-parse", "HEAD"), Branch: "ralph/x",
		Message: gitwork.Message{Subject: "US-1: One", Body: "ok", Session: "s1", Task: "US-1"},
		PRDFile: "prd.json", Story: "US-1",
		Progress: ProgressEntry{Session: "s1", TaskID: "US-1", Title: "One", Summary: "did it\nLearnings:\n- Pattern: p"}}
	return s, ws, plan
}

func TestCommitTicksTheStoryOffInTheSameCommit(t *testing.T) {
	s, ws, plan := committer(t)
	res, err := s.makeCommit(context.Background(), plan)
	if err != nil || res.Commit == nil || res.Patterns != "- p" {
		t.Fatalf("result %+v, %v", res, err)
	}
	if files := gitT(t, ws, "show", "--name-only", "--format=", "HEAD"); files != "one.txt\nprd.json\nprogress.txt" {
		t.Errorf("committed %q", files)
	}
	if got := gitT(t, ws, "show", "HEAD:prd.json"); got+"\n" != strings.Replace(storiesJSON, `"passes": false`, `"passes": true`, 1) {
		t.Errorf("prd.json:\n%s", got)
	}
}

// A commit made by a replica that died before journaling it is found by
// its trailers on the next delivery, not made again.
func TestACommitAlreadyMadeIsFoundNotMadeTwice(t *testing.T) {
	s, ws, plan := committer(t)
	first, err := s.makeCommit(context.Background(), plan)
	if err != nil || first.Commit == nil {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if err := os.WriteFile(filepath.Join(ws, "later.txt"), []byte("not this task's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := s.makeCommit(context.Background(), plan)
	if err != nil || again.Commit == nil || again.Commit.SHA != first.Commit.SHA || again.Patterns != "- p" {
		t.Fatalf("again: %+v, %v; want the first commit %s", again, err, first.Commit.SHA)
	}
	if n := gitT(t, ws, "rev-list", "--count", plan.Base+"..HEAD"); n != "1" {
		t.Errorf("%s commits after the base, want 1", n)
	}
}

// A refused commit leaves the notes as they were: the prd.json does not
// say the story passes, progress.txt has no entry.
func TestARefusedCommitPutsTheNotesBack(t *testing.T) {
	s, ws, plan := committer(t)
	hook := filepath.Join(ws, ".git", "hooks", "pre-commit")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'one.txt: missing license header'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := s.makeCommit(context.Background(), plan)
	if err != nil || res.RejectedBy != "pre-commit hook" || !strings.Contains(res.Output, "missing license header") {
		t.Fatalf("result %+v, %v", res, err)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "prd.json")); string(data) != storiesJSON {
		t.Errorf("prd.json after the refusal:\n%s", data)
	}
	if _, err := os.Stat(filepath.Join(ws, "progress.txt")); !os.IsNotExist(err) {
		t.Errorf("progress.txt after the refusal: %v", err)
	}
}

// A prd.json the agent broke is the builder's to repair: a rejection
// naming the file, not a crash, and nothing is committed.
func TestABrokenPRDJSONIsARejection(t *testing.T) {
	s, ws, plan := committer(t)
	if err := os.WriteFile(filepath.Join(ws, "prd.json"), []byte(`{"userStories": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	head := gitT(t, ws, "rev-parse", "HEAD")
	res, err := s.makeCommit(context.Background(), plan)
	if err != nil || res.RejectedBy != "prd.json" || !strings.Contains(res.Output, "git show HEAD:prd.json") {
		t.Fatalf("result %+v, %v", res, err)
	}
	if gitT(t, ws, "rev-parse", "HEAD") != head {
		t.Error("a commit was made")
	}
	if _, err := os.Stat(filepath.Join(ws, "progress.txt")); !os.IsNotExist(err) {
		t.Errorf("progress.txt was left behind: %v", err)
	}
}

// With --push each commit is pushed; a push that fails is reported with
// the commit, which stays made.
func TestCommitsArePushedWhenAsked(t *testing.T) {
	s, ws, plan := committer(t)
	remote := filepath.Join(t.TempDir(), "remote.git")
	gitT(t, ws, "init", "-q", "--bare", remote)
	gitT(t, ws, "remote", "add", "origin", remote)
	plan.Push, plan.PushDigest = "origin", gitwork.URLDigest(remote)
	res, err := s.makeCommit(context.Background(), plan)
	if err != nil || res.Commit == nil || !res.Commit.Pushed || res.Commit.PushError != "" {
		t.Fatalf("result %+v, %v", res.Commit, err)
	}
	if got := gitT(t, remote, "rev-parse", "refs/heads/ralph/x"); got != res.Commit.SHA {
		t.Errorf("remote at %s, want %s", got, res.Commit.SHA)
	}
	_, ws2, plan2 := committer(t)
	missing := filepath.Join(t.TempDir(), "missing.git")
	gitT(t, ws2, "remote", "add", "origin", missing)
	plan2.Push, plan2.PushDigest = "origin", gitwork.URLDigest(missing)
	res, err = s.makeCommit(context.Background(), plan2)
	if err != nil || res.Commit == nil || res.Commit.Pushed || res.Commit.PushError == "" {
		t.Fatalf("push to nowhere: %+v, %v", res.Commit, err)
	}
	if gitT(t, ws2, "rev-parse", "HEAD") != res.Commit.SHA {
		t.Error("the commit was undone by the failed push")
	}
	// The agent pointed the remote elsewhere: nothing is pushed, and the
	// URL's token is not quoted.
	_, ws3, plan3 := committer(t)
	gitT(t, ws3, "remote", "add", "origin", remote)
	plan3.Push, plan3.PushDigest = "origin", gitwork.URLDigest(remote)
	gitT(t, ws3, "remote", "set-url", "origin", "https://x:s3cret-token@evil.example/r.git")
	res, err = s.makeCommit(context.Background(), plan3)
	if err != nil || res.Commit == nil || res.Commit.Pushed || !strings.Contains(res.Commit.PushError, "changed since the session started") ||
		strings.Contains(res.Commit.PushError, "s3cret-token") {
		t.Fatalf("push to a changed remote: %+v, %v", res.Commit, err)
	}
}
