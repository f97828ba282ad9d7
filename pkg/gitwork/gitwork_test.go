package gitwork_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/internal/sandboxtest"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/sandbox"
)

// git runs git in dir as a person would, for the tests' own setup.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t testing.TB, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// newRepo is a repository with one commit on main.
func newRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	write(t, dir, "README.md", "# test\n")
	git(t, dir, "add", "README.md")
	git(t, dir, "commit", "-q", "-m", "initial commit")
	return dir
}

func open(t testing.TB, dir string, sb *sandbox.Sandbox) *gitwork.Repo {
	t.Helper()
	r, err := gitwork.Open(context.Background(), dir, sb, gitwork.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOpenRefusesWhatIsNotAWorkspaceRepository(t *testing.T) {
	ctx := context.Background()
	if _, err := gitwork.Open(ctx, t.TempDir(), nil, gitwork.Config{}); !errors.Is(err, gitwork.ErrNotRepository) {
		t.Errorf("plain directory: %v, want ErrNotRepository", err)
	}
	repo := newRepo(t)
	sub := filepath.Join(repo, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := gitwork.Open(ctx, sub, nil, gitwork.Config{}); !errors.Is(err, gitwork.ErrNotTopLevel) {
		t.Errorf("subdirectory: %v, want ErrNotTopLevel", err)
	}
	wt := filepath.Join(t.TempDir(), "wt")
	git(t, repo, "worktree", "add", "-q", wt)
	if _, err := gitwork.Open(ctx, wt, nil, gitwork.Config{}); !errors.Is(err, gitwork.ErrNotTopLevel) {
		t.Errorf("linked worktree: %v, want ErrNotTopLevel", err)
	}
	empty := t.TempDir()
	git(t, empty, "init", "-q")
	if _, err := open(t, empty, nil).Head(ctx); !errors.Is(err, gitwork.ErrNoCommits) {
		t.Errorf("unborn HEAD: %v, want ErrNoCommits", err)
	}
}

func TestChangesSeeModifiedAndUntrackedFiles(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := open(t, dir, nil)
	if cs, err := r.Changes(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("clean tree: %v, %v", cs, err)
	}
	write(t, dir, "README.md", "# changed\n")
	write(t, dir, "new dir/file.txt", "x\n")
	cs, err := r.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(cs))
	for i, c := range cs {
		got[i] = c.String()
	}
	if strings.Join(got, "|") != " M README.md|?? new dir/file.txt" {
		t.Errorf("changes %q", got)
	}
}

func TestCheckoutCreatesThenContinuesTheBranch(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := open(t, dir, sandbox.Unconfined())
	start := git(t, dir, "rev-parse", "HEAD")
	head, err := r.Checkout(ctx, "ralph/feature")
	if err != nil {
		t.Fatal(err)
	}
	if head != start || git(t, dir, "branch", "--show-current") != "ralph/feature" {
		t.Fatalf("created branch at %s (HEAD was %s), on %s", head, start, git(t, dir, "branch", "--show-current"))
	}
	write(t, dir, "a.txt", "a\n")
	git(t, dir, "add", "a.txt")
	git(t, dir, "commit", "-q", "-m", "work")
	tip := git(t, dir, "rev-parse", "HEAD")
	git(t, dir, "switch", "-q", "main")
	head, err = r.Checkout(ctx, "ralph/feature")
	if err != nil {
		t.Fatal(err)
	}
	if head != tip || git(t, dir, "branch", "--show-current") != "ralph/feature" {
		t.Fatalf("continued at %s, want the branch's tip %s", head, tip)
	}
	if _, err := r.Checkout(ctx, "-evil"); err == nil {
		t.Fatal("a branch name that reads as an option was taken")
	}
}

func message(task string) gitwork.Message {
	return gitwork.Message{Subject: task + ": Greeting file", Body: "All criteria are met.\n\nThe file\nexists.", Session: "s-1", Task: task}
}

func TestCommitWithTrailersFoundAgainByThem(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	r := open(t, dir, sandbox.Unconfined())
	base := git(t, dir, "rev-parse", "HEAD")
	write(t, dir, "greeting.txt", "hello\n")
	out, err := r.Commit(ctx, message("T1"), gitwork.Identity{Name: "Ralph", Email: "r@example.com"})
	if err != nil || out.SHA == "" {
		t.Fatalf("commit: %+v, %v", out, err)
	}
	msg := git(t, dir, "log", "-1", "--format=%B")
	want := "T1: Greeting file\n\nAll criteria are met. The file exists.\n\nRalph-Session: s-1\nRalph-Task: T1"
	if msg != want {
		t.Errorf("message:\n%s\nwant:\n%s", msg, want)
	}
	if who := git(t, dir, "log", "-1", "--format=%an <%ae>"); who != "Ralph <r@example.com>" {
		t.Errorf("author %s", who)
	}
	if files := git(t, dir, "show", "--name-only", "--format=", "HEAD"); files != "greeting.txt" {
		t.Errorf("committed files %q", files)
	}
	sha, found, err := r.FindCommit(ctx, base, "s-1", "T1")
	if err != nil || !found || sha != out.SHA {
		t.Errorf("FindCommit = %s, %v, %v; want %s", sha, found, err, out.SHA)
	}
	if _, found, _ := r.FindCommit(ctx, base, "s-1", "T2"); found {
		t.Error("found a commit of a task never committed")
	}
	if _, found, _ := r.FindCommit(ctx, base, "s-2", "T1"); found {
		t.Error("found the commit of another session's task")
	}
	again, err := r.Commit(ctx, message("T2"), gitwork.Identity{Name: "Ralph", Email: "r@example.com"})
	if err != nil || !again.Empty || again.SHA != "" {
		t.Errorf("commit with nothing changed: %+v, %v; want Empty", again, err)
	}
}

func TestFailingHooksAreOutcomesNotErrors(t *testing.T) {
	ctx := context.Background()
	for _, hook := range []string{"pre-commit", "commit-msg"} {
		t.Run(hook, func(t *testing.T) {
			dir := newRepo(t)
			write(t, dir, ".git/hooks/"+hook, "#!/bin/sh\necho 'lint: trailing space in greeting.txt' >&2\nexit 1\n")
			r := open(t, dir, sandbox.Unconfined())
			head := git(t, dir, "rev-parse", "HEAD")
			write(t, dir, "greeting.txt", "hello \n")
			out, err := r.Commit(ctx, message("T1"), gitwork.Identity{Name: "R", Email: "r@x"})
			if err != nil {
				t.Fatal(err)
			}
			if out.Hook != hook || !strings.Contains(out.Output, "trailing space") || out.SHA != "" {
				t.Errorf("outcome %+v, want a %s refusal with its output", out, hook)
			}
			if now := git(t, dir, "rev-parse", "HEAD"); now != head {
				t.Error("a refused commit was made")
			}
		})
	}
}

// A commit's hooks run in the sandbox: a pre-commit hook cannot write
// outside the workspace.
func TestHooksRunInTheSandbox(t *testing.T) {
	sandboxtest.Require(t)
	sb, err := sandbox.New(sandbox.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "escaped")
	dir := newRepo(t)
	write(t, dir, ".git/hooks/pre-commit", "#!/bin/sh\ntouch '"+outside+"' 2>/dev/null\ntouch ran-in-workspace\ngit add ran-in-workspace\n")
	write(t, dir, "a.txt", "a\n")
	out, err := open(t, dir, sb).Commit(context.Background(), message("T1"), gitwork.Identity{Name: "R", Email: "r@x"})
	if err != nil || out.SHA == "" {
		t.Fatalf("commit: %+v, %v", out, err)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Error("the hook wrote outside the workspace")
	}
	if files := git(t, dir, "show", "--name-only", "--format=", "HEAD"); !strings.Contains(files, "ran-in-workspace") {
		t.Errorf("the hook did not run (committed %q)", files)
	}
}

// What only reads runs on the host, and runs nothing the repository's
// configuration names: no fsmonitor, no filter driver, no textconv.
func TestReadsRunNoProgramTheRepositoryNames(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	marker := filepath.Join(t.TempDir(), "pwned")
	write(t, dir, ".gitattributes", "* filter=evil.x diff=evil\n")
	git(t, dir, "add", ".gitattributes")
	git(t, dir, "commit", "-q", "-m", "attributes")
	base := git(t, dir, "rev-parse", "HEAD")
	for key, value := range map[string]string{
		"filter.evil.x.clean":    "touch " + marker + "; cat",
		"filter.evil.x.process":  "touch " + marker,
		"filter.evil.x.required": "true",
		"core.fsmonitor":         "touch " + marker + "; false",
		"diff.evil.textconv":     "touch " + marker + "; cat",
		"core.pager":             "touch " + marker + "; cat",
	} {
		git(t, dir, "config", key, value)
	}
	write(t, dir, "README.md", "# changed\n")
	r := open(t, dir, nil)
	if _, err := r.Changes(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := r.Diff(ctx, base, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Text, "+# changed") {
		t.Errorf("diff %q lacks the change", d.Text)
	}
	if _, err := r.Identity(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a program named by the repository's configuration ran")
	}
}

func TestDiffShowsWholeFilesWithinItsBound(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	base := git(t, dir, "rev-parse", "HEAD")
	write(t, dir, "committed.txt", "one\n")
	git(t, dir, "add", "committed.txt")
	git(t, dir, "commit", "-q", "-m", "a subtask's commit")
	write(t, dir, "README.md", "# test\nmore\n")
	write(t, dir, "new.txt", "brand new\n")
	write(t, dir, "big.txt", strings.Repeat("a long line of text\n", 200))
	d, err := open(t, dir, nil).Diff(ctx, base, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+one", "+more", "+++ b/new.txt", "+brand new"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("diff lacks %q:\n%s", want, d.Text)
		}
	}
	if d.Files != 4 || len(d.Omitted) != 1 || !strings.HasPrefix(d.Omitted[0], "big.txt (new") {
		t.Errorf("files %d, omitted %q; want 4 and big.txt", d.Files, d.Omitted)
	}
	if strings.Contains(d.Text, "a long line") {
		t.Error("part of an omitted file is shown")
	}
	if _, err := open(t, dir, nil).Diff(ctx, "--output=/tmp/x", 1000); err == nil {
		t.Error("a base that reads as an option was taken")
	}
}

func TestIdentityIsTheUsersElseTheConfigured(t *testing.T) {
	ctx := context.Background()
	t.Setenv("HOME", t.TempDir()) // no global identity
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := newRepo(t)
	r, err := gitwork.Open(ctx, dir, nil, gitwork.Config{AuthorName: "Configured", AuthorEmail: "c@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := r.Identity(ctx); id != (gitwork.Identity{Name: "Configured", Email: "c@example.com"}) {
		t.Errorf("without git config: %+v", id)
	}
	git(t, dir, "config", "user.name", "Ada")
	git(t, dir, "config", "user.email", "ada@example.com")
	if id, _ := r.Identity(ctx); id != (gitwork.Identity{Name: "Ada", Email: "ada@example.com"}) {
		t.Errorf("with git config: %+v", id)
	}
}

// A push goes from a clean repository of its own: the workspace's
// configuration (here a receive-pack program) is not used.
func TestPushIgnoresTheWorkspacesConfiguration(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	remote := filepath.Join(t.TempDir(), "remote.git")
	git(t, dir, "init", "-q", "--bare", remote)
	git(t, dir, "remote", "add", "origin", remote)
	r := open(t, dir, sandbox.Unconfined())
	url, err := r.RemoteURL(ctx, "origin")
	if err != nil || url != remote {
		t.Fatalf("RemoteURL = %q, %v", url, err)
	}
	marker := filepath.Join(t.TempDir(), "pwned")
	git(t, dir, "config", "remote.origin.receivepack", "touch "+marker+"; git-receive-pack")
	git(t, dir, "config", "core.sshCommand", "touch "+marker)
	head := git(t, dir, "rev-parse", "HEAD")
	if err := r.Push(ctx, url, "ralph/x", head); err != nil {
		t.Fatal(err)
	}
	if got := git(t, remote, "rev-parse", "refs/heads/ralph/x"); got != head {
		t.Errorf("remote has %s, want %s", got, head)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the workspace's receive-pack ran")
	}
	if _, err := r.RemoteURL(ctx, "nowhere"); err == nil {
		t.Error("a remote that does not exist has a URL")
	}
}

// A push that fails does not quote the token of its URL.
func TestPushErrorsHideTheURLsSecret(t *testing.T) {
	dir := newRepo(t)
	r := open(t, dir, sandbox.Unconfined())
	head := git(t, dir, "rev-parse", "HEAD")
	err := r.Push(context.Background(), "https://ada:s3cret-token@127.0.0.1:1/r.git", "ralph/x", head)
	if err == nil {
		t.Fatal("a push to a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cret-token") || !strings.Contains(err.Error(), "https://ada:****@127.0.0.1:1/r.git") {
		t.Errorf("error %q", err)
	}
}
