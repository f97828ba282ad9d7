package gitwork

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// lockRefused is how git says a lock it needs is held: "Unable to create
// '<path>.lock': File exists." (index.lock, HEAD.lock, a ref's lock). Git
// leaves the file behind when it is killed, and tells a person to remove
// it by hand "if no other git process is currently running".
var lockRefused = regexp.MustCompile(`Unable to create '([^']+\.lock)': File exists`)

// confinedUnlocked is confined for the platform's own writes (switching
// branches, committing). When git refuses because of a lock file in the
// repository's .git, the file is taken for one left by a git that was
// killed (the builder that ran it died mid-command, and the sandbox took
// its children with it) once it is StaleLock old: a live git holds a lock
// for milliseconds, a commit's hooks for as long as they run, and the
// session's commands are run one at a time. A younger lock is waited for
// until it reaches that age, or goes; then the command runs again, once
// per lock.
func (r *Repo) confinedUnlocked(ctx context.Context, env []string, args ...string) (result, error) {
	removed := map[string]bool{}
	for {
		res, err := r.confined(ctx, env, args...)
		if err != nil || res.exitCode == 0 {
			return res, err
		}
		path, ok := r.refusingLock(res.out)
		if !ok || removed[path] {
			return res, nil
		}
		if err := r.clearStaleLock(ctx, path); err != nil {
			return res, err
		}
		removed[path] = true
	}
}

// refusingLock is the lock file git's output says it could not create,
// when it is inside this repository's .git directory.
func (r *Repo) refusingLock(out []byte) (string, bool) {
	m := lockRefused.FindSubmatch(out)
	if m == nil {
		return "", false
	}
	path := filepath.Clean(string(m[1]))
	if !filepath.IsAbs(path) {
		path = filepath.Join(r.dir, path)
	}
	gitDir := filepath.Join(r.dir, ".git") + string(filepath.Separator)
	if !strings.HasPrefix(path, gitDir) {
		return "", false
	}
	return path, true
}

// clearStaleLock removes the lock at path once it is StaleLock old, waiting
// (bounded by ctx) while it is younger. A lock that goes meanwhile needs
// nothing more.
func (r *Repo) clearStaleLock(ctx context.Context, path string) error {
	for {
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("git lock %s: %w", path, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("git lock %s is not a regular file: %w", path, ErrGit)
		}
		age := time.Since(fi.ModTime())
		if age >= r.cfg.StaleLock {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove stale git lock %s: %w", path, err)
			}
			return nil
		}
		wait := time.NewTimer(r.cfg.StaleLock - age)
		select {
		case <-ctx.Done():
			wait.Stop()
			return fmt.Errorf("git lock %s (%s old, stale at %s, RALPH_GIT_STALE_LOCK): %w", path, age.Round(time.Second), r.cfg.StaleLock, ctx.Err())
		case <-wait.C:
		}
	}
}
