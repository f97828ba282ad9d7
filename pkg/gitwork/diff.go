package gitwork

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/ralphmesh/ralph/pkg/tools"
)

// Diff is what changed from a base commit to the work tree, for a
// reviewer: whole file sections of a unified diff within a bound, and the
// files left out named with their size.
type Diff struct {
	// Text is the unified diff of the files shown, each whole: tracked
	// files as git diff shows them, then new untracked files.
	Text string
	// Omitted are the files whose diff did not fit, "path (+added -deleted
	// lines)".
	Omitted []string
	// Files counts every file that changed.
	Files int
}

// Diff is base..work tree: committed and uncommitted changes since base,
// untracked files included (not ignored ones), at most maxBytes of diff
// text. A file's diff is shown whole or not at all: a reviewer must not
// judge half a change.
func (r *Repo) Diff(ctx context.Context, base string, maxBytes int) (Diff, error) {
	if err := r.checkRev(ctx, base); err != nil {
		return Diff{}, err
	}
	kv, err := r.neutralised(ctx)
	if err != nil {
		return Diff{}, err
	}
	diffArgs := []string{"--no-ext-diff", "--no-textconv", "--no-color", "--find-renames", "--ignore-submodules=all"}
	numstat, err := r.host(ctx, kv, append(append([]string{"diff", "--numstat", "-z"}, diffArgs...), base, "--")...)
	if err != nil {
		return Diff{}, err
	}
	if numstat.exitCode != 0 {
		return Diff{}, fmt.Errorf("diff %s: %w: %s", base, ErrGit, firstLines(numstat.stderr, 3))
	}
	stats := parseNumstat(numstat.out)
	var d Diff
	var b strings.Builder
	add := func(section, label string) {
		if b.Len()+len(section) <= maxBytes {
			b.WriteString(section)
			return
		}
		d.Omitted = append(d.Omitted, label)
	}
	for _, st := range stats {
		d.Files++
		label := fmt.Sprintf("%s (%s)", st.path, st.size())
		if b.Len() >= maxBytes {
			d.Omitted = append(d.Omitted, label)
			continue
		}
		res, err := r.host(ctx, kv, append(append([]string{"diff"}, diffArgs...), base, "--", st.path)...)
		if err != nil {
			return Diff{}, err
		}
		if res.truncated {
			d.Omitted = append(d.Omitted, label)
			continue
		}
		add(string(res.out), label)
	}
	others, err := r.must(ctx, "ls-files", "-z", "--others", "--exclude-standard")
	if err != nil {
		return Diff{}, err
	}
	ws, err := tools.NewWorkspace(r.dir)
	if err != nil {
		return Diff{}, err
	}
	for _, p := range strings.Split(string(others), "\x00") {
		if p == "" {
			continue
		}
		d.Files++
		section, size := newFileSection(ws, p, maxBytes)
		label := fmt.Sprintf("%s (new, %s)", p, size)
		if section == "" {
			d.Omitted = append(d.Omitted, label)
			continue
		}
		add(section, label)
	}
	d.Text = b.String()
	return d, nil
}

// checkRev refuses a base that is not a commit of the repository (or
// could be read as an option).
func (r *Repo) checkRev(ctx context.Context, rev string) error {
	if rev == "" || strings.HasPrefix(rev, "-") {
		return fmt.Errorf("diff: base %q is not a commit", rev)
	}
	res, err := r.read(ctx, "rev-parse", "--verify", "-q", rev+"^{commit}")
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		return fmt.Errorf("diff: base %s is not a commit of %s", rev, r.dir)
	}
	return nil
}

type fileStat struct {
	path           string
	added, deleted string
	binary         bool
}

func (s fileStat) size() string {
	if s.binary {
		return "binary"
	}
	return fmt.Sprintf("+%s -%s lines", s.added, s.deleted)
}

// parseNumstat reads `git diff --numstat -z`: "added\tdeleted\tpath\0",
// and for a rename "added\tdeleted\t\0old\0new\0".
func parseNumstat(out []byte) []fileStat {
	var stats []fileStat
	fields := strings.Split(string(out), "\x00")
	for i := 0; i < len(fields); i++ {
		f := strings.SplitN(fields[i], "\t", 3)
		if len(f) != 3 {
			continue
		}
		st := fileStat{added: f[0], deleted: f[1], path: f[2], binary: f[0] == "-"}
		if st.path == "" && i+2 < len(fields) {
			st.path = fields[i+2]
			i += 2
		}
		stats = append(stats, st)
	}
	return stats
}

// newFileSection is an untracked file as a diff of a new file, read
// without following a symlink or blocking on a pipe, and its size. A file
// larger than limit has no section ("") and is named with its size; one
// that cannot be read is shown as what it is.
func newFileSection(ws *tools.Workspace, rel string, limit int) (string, string) {
	header := fmt.Sprintf("diff --git a/%s b/%s\nnew file\n--- /dev/null\n+++ b/%s\n", rel, rel, rel)
	abs, err := ws.Resolve(rel)
	if err != nil {
		return header + fmt.Sprintf("(not shown: %v)\n", err), "not shown"
	}
	fi, err := os.Lstat(abs)
	if err != nil || !fi.Mode().IsRegular() {
		return header + "(not a regular file)\n", "not a regular file"
	}
	if fi.Size() > int64(limit) {
		return "", fmt.Sprintf("%d bytes", fi.Size())
	}
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return header + fmt.Sprintf("(unreadable: %v)\n", err), "unreadable"
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return header + fmt.Sprintf("(unreadable: %v)\n", err), "unreadable"
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return header + "Binary file\n", "binary"
	}
	text := strings.TrimSuffix(string(data), "\n")
	lines := strings.Split(text, "\n")
	if text == "" {
		lines = nil
	}
	var b strings.Builder
	b.WriteString(header)
	if len(lines) > 0 {
		fmt.Fprintf(&b, "@@ -0,0 +1,%d @@\n", len(lines))
	}
	for _, l := range lines {
		b.WriteString("+" + l + "\n")
	}
	return b.String(), fmt.Sprintf("+%d lines", len(lines))
}
