package gitwork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ralphmesh/ralph/pkg/gitref"
	"github.com/ralphmesh/ralph/pkg/sandbox"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Errors of Open, for the CLI to turn into a clear refusal.
var (
	// ErrNotRepository: the workspace is not in a git repository.
	ErrNotRepository = errors.New("not a git repository")
	// ErrNotTopLevel: the workspace is inside a repository but not its
	// top level, or its .git is not a directory inside it (a linked
	// worktree, a submodule): the sandbox, which sees only the workspace,
	// could not commit.
	ErrNotTopLevel = errors.New("not the top level of its git repository")
	// ErrNoCommits: the repository has no commit yet, so there is no HEAD
	// to start the session's branch from.
	ErrNoCommits = errors.New("the repository has no commit yet")
)

// Repo is a workspace that is the top level of a git repository.
type Repo struct {
	dir string
	sb  *sandbox.Sandbox
	cfg Config
}

// Open checks that dir (absolute) is the top level of a git repository
// whose .git directory is inside it. sb runs the commands that write to
// the repository; nil for a caller that only reads (the CLI's checks).
func Open(ctx context.Context, dir string, sb *sandbox.Sandbox, cfg Config) (*Repo, error) {
	settings.FillZero(&cfg)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", dir, err)
	}
	r := &Repo{dir: real, sb: sb, cfg: cfg}
	res, err := r.host(ctx, hardened, "rev-parse", "--show-toplevel", "--absolute-git-dir")
	if err != nil {
		return nil, err
	}
	if res.exitCode != 0 {
		return nil, fmt.Errorf("%s: %w (%s)", dir, ErrNotRepository, firstLines(res.stderr, 1))
	}
	lines := strings.Split(strings.TrimSpace(string(res.out)), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("%s: %w: %s", dir, ErrNotRepository, "a bare repository has no work tree")
	}
	top, gitDir := lines[0], lines[1]
	if top != real {
		return nil, fmt.Errorf("%s: %w: the repository's top level is %s", dir, ErrNotTopLevel, top)
	}
	if fi, err := os.Lstat(filepath.Join(real, ".git")); err != nil || !fi.IsDir() || gitDir != filepath.Join(real, ".git") {
		return nil, fmt.Errorf("%s: %w: its git directory is %s, not a .git directory inside it (a linked worktree or a submodule)", dir, ErrNotTopLevel, gitDir)
	}
	return r, nil
}

// Dir is the work tree (absolute, symlink-free).
func (r *Repo) Dir() string { return r.dir }

// Head is the commit HEAD points at; ErrNoCommits on an unborn branch.
func (r *Repo) Head(ctx context.Context) (string, error) {
	res, err := r.read(ctx, "rev-parse", "--verify", "-q", "HEAD^{commit}")
	if err != nil {
		return "", err
	}
	if res.exitCode != 0 {
		return "", fmt.Errorf("%s: %w", r.dir, ErrNoCommits)
	}
	return strings.TrimSpace(string(res.out)), nil
}

// Branch is the branch HEAD is on, "" when it is detached.
func (r *Repo) Branch(ctx context.Context) (string, error) {
	res, err := r.read(ctx, "symbolic-ref", "-q", "--short", "HEAD")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(res.out)), nil
}

// BranchTip is the commit branch points at, and whether it exists.
func (r *Repo) BranchTip(ctx context.Context, branch string) (string, bool, error) {
	res, err := r.read(ctx, "rev-parse", "--verify", "-q", "refs/heads/"+branch+"^{commit}")
	if err != nil {
		return "", false, err
	}
	if res.exitCode != 0 {
		return "", false, nil
	}
	return strings.TrimSpace(string(res.out)), true, nil
}

// CheckBranchName refuses a name git would not take for a branch.
func (r *Repo) CheckBranchName(ctx context.Context, name string) error {
	if err := gitref.ValidBranch(name); err != nil {
		return err
	}
	res, err := r.read(ctx, "check-ref-format", "--branch", name)
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		return fmt.Errorf("branch name %q: git refuses it (see git check-ref-format)", name)
	}
	return nil
}

// HasRemote reports whether the repository has a remote of that name.
func (r *Repo) HasRemote(ctx context.Context, name string) (bool, error) {
	res, err := r.read(ctx, "config", "--get", "remote."+name+".url")
	if err != nil {
		return false, err
	}
	return res.exitCode == 0, nil
}

// Change is one path of `git status`: its two-letter state (" M", "??",
// "A ", ...) and its path.
type Change struct {
	State string
	Path  string
}

func (c Change) String() string { return c.State + " " + c.Path }

// Changes lists what differs from HEAD in the index and the work tree,
// untracked files included (ignored ones not): a work tree is clean when
// it is empty.
func (r *Repo) Changes(ctx context.Context) ([]Change, error) {
	out, err := r.must(ctx, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=all")
	if err != nil {
		return nil, err
	}
	return parseStatus(out), nil
}

// parseStatus reads `git status --porcelain=v1 -z`: "XY path\0", and for a
// rename or copy "XY new\0old\0".
func parseStatus(out []byte) []Change {
	var cs []Change
	fields := bytes.Split(out, []byte{0})
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		c := Change{State: string(f[:2]), Path: string(f[3:])}
		if c.State[0] == 'R' || c.State[0] == 'C' {
			i++ // the original path
		}
		cs = append(cs, c)
	}
	return cs
}

// Checkout puts the work tree on branch: it stays if it is there, switches
// to it if it exists, or creates it from HEAD. It returns the branch's
// commit. Switching runs in the sandbox (a post-checkout hook runs there);
// uncommitted changes are carried along, and git refuses the switch when
// they would be overwritten.
func (r *Repo) Checkout(ctx context.Context, branch string) (string, error) {
	if err := gitref.ValidBranch(branch); err != nil {
		return "", err
	}
	cur, err := r.Branch(ctx)
	if err != nil {
		return "", err
	}
	if cur != branch {
		_, exists, err := r.BranchTip(ctx, branch)
		if err != nil {
			return "", err
		}
		args := []string{"git", "switch", "--quiet", branch}
		if !exists {
			args = []string{"git", "switch", "--quiet", "--create", branch}
		}
		res, err := r.confinedUnlocked(ctx, nil, args...)
		if err != nil {
			return "", err
		}
		if res.exitCode != 0 {
			return "", fmt.Errorf("switch %s to branch %s: %w: exit %d: %s", r.dir, branch, ErrGit, res.exitCode, firstLines(res.out, 6))
		}
	}
	return r.Head(ctx)
}

// Identity is who commits: git's user.name and user.email as the user
// configured them, else the configured settings.
type Identity struct {
	Name, Email string
}

// Identity reads git's user.name and user.email (system, global, the
// repository's), each falling back to Config.
func (r *Repo) Identity(ctx context.Context) (Identity, error) {
	id := Identity{Name: r.cfg.AuthorName, Email: r.cfg.AuthorEmail}
	for key, dst := range map[string]*string{"user.name": &id.Name, "user.email": &id.Email} {
		res, err := r.host(ctx, hardened, "config", "--get", key)
		if err != nil {
			return Identity{}, err
		}
		if v := strings.TrimSpace(string(res.out)); res.exitCode == 0 && v != "" {
			*dst = v
		}
	}
	return id, nil
}

func (id Identity) env() []string {
	return []string{"GIT_AUTHOR_NAME=" + id.Name, "GIT_AUTHOR_EMAIL=" + id.Email,
		"GIT_COMMITTER_NAME=" + id.Name, "GIT_COMMITTER_EMAIL=" + id.Email}
}

// LogLine is one commit as `git log --oneline` shows it.
type LogLine struct {
	SHA, Subject string
}

// Log lists the commits of rev (a branch, or base..branch), newest first,
// at most max.
func (r *Repo) Log(ctx context.Context, rev string, max int) ([]LogLine, error) {
	out, err := r.must(ctx, "log", fmt.Sprintf("--max-count=%d", max), "--format=%H%x1f%s%x1e", rev, "--")
	if err != nil {
		return nil, err
	}
	var lines []LogLine
	for _, rec := range strings.Split(string(out), "\x1e") {
		sha, subject, ok := strings.Cut(strings.TrimSpace(rec), "\x1f")
		if ok {
			lines = append(lines, LogLine{SHA: sha, Subject: subject})
		}
	}
	return lines, nil
}
