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
// repository's .git that is at least StaleLock old, the file is taken for
// one left by a git that was killed, removed, and the command runs again
// (once per lock). A builder killed while it switched or committed leaves
// such a lock (the sandbox takes git down with it), and the event is
// redelivered an ack wait later (RALPH_STREAM_ACK_WAIT, 30 s), when the
// lock is older than StaleLock (20 s). A live git holds its lock for
// milliseconds and every command of a session's agent is gone when its
// call ends, so a lock that old is nobody's; a younger one is left alone
// and git's refusal stands, as before.
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
		stale, err := r.removeIfStale(path)
		if err != nil || !stale {
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

// removeIfStale removes the lock at path when it is at least StaleLock
// old (or already gone), and says whether the command can run again.
func (r *Repo) removeIfStale(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("git lock %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || time.Since(fi.ModTime()) < r.cfg.StaleLock {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove stale git lock %s: %w", path, err)
	}
	return true, nil
}
