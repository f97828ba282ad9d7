package gitwork_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/sandbox"
)

// plantLock leaves a lock file in the repository's .git as a git killed
// mid-command does, aged by age.
func plantLock(t *testing.T, dir, rel string, age time.Duration) string {
	t.Helper()
	path := filepath.Join(dir, ".git", filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-age)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return path
}

func openWith(t *testing.T, dir string, cfg gitwork.Config) *gitwork.Repo {
	t.Helper()
	r, err := gitwork.Open(context.Background(), dir, sandbox.Unconfined(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A builder killed while it created the session's branch or committed
// leaves a lock git refuses to work with; the platform's next try removes
// it once it is stale and goes on, instead of failing the session.
func TestStaleLocksLeftByAKilledGitAreRemoved(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, lock string
		do         func(r *gitwork.Repo, dir string) error
	}{
		{"branch creation, the ref's lock", "refs/heads/ralph/prd.lock", func(r *gitwork.Repo, _ string) error {
			_, err := r.Checkout(ctx, "ralph/prd")
			return err
		}},
		{"commit, the index lock", "index.lock", func(r *gitwork.Repo, dir string) error {
			write(t, dir, "a.txt", "a\n")
			out, err := r.Commit(ctx, message("T1"), gitwork.Identity{Name: "Ada", Email: "ada@example.com"})
			if err == nil && out.SHA == "" {
				t.Errorf("no commit: %+v", out)
			}
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := newRepo(t)
			lock := plantLock(t, dir, c.lock, 2*time.Minute)
			if err := c.do(openWith(t, dir, gitwork.Config{StaleLock: time.Minute}), dir); err != nil {
				t.Fatalf("with a stale %s: %v", c.lock, err)
			}
			if _, err := os.Stat(lock); err == nil {
				t.Errorf("%s is still there", c.lock)
			}
		})
	}
}

// A lock younger than RALPH_GIT_STALE_LOCK may be a live git's: it is left
// alone and git's refusal stands.
func TestAYoungLockIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	lock := plantLock(t, dir, "refs/heads/ralph/prd.lock", 0)
	_, err := openWith(t, dir, gitwork.Config{StaleLock: time.Hour}).Checkout(ctx, "ralph/prd")
	if err == nil || !strings.Contains(err.Error(), "prd.lock") {
		t.Fatalf("err %v, want git's refusal naming the lock", err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Errorf("a young lock was removed: %v", err)
	}
}
