package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree is a random workspace and the changes a command can make to it.
type tree struct {
	t    *testing.T
	root string
	rnd  *rand.Rand
	n    int // names handed out
}

func newRandomTree(t *testing.T, seed uint64, files int) *tree {
	t.Helper()
	tr := &tree{t: t, root: t.TempDir(), rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for range files {
		tr.write(tr.newPath(), tr.content(1+tr.rnd.IntN(200)))
	}
	// Bookkeeping that must never count: .git, a symlink, a fifo-free
	// empty directory.
	mustWrite(t, filepath.Join(tr.root, ".git", "HEAD"), "ref: refs/heads/main\n")
	mustMkdir(t, filepath.Join(tr.root, "empty", "deeper"))
	return tr
}

func (tr *tree) newPath() string {
	tr.n++
	dirs := []string{"", "a", "a/b", "a/b/c", "d", "d.e", "d-e"}
	return join(dirs[tr.rnd.IntN(len(dirs))], fmt.Sprintf("f%d.txt", tr.n))
}

func (tr *tree) content(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + tr.rnd.IntN(26))
	}
	return string(b)
}

func (tr *tree) abs(rel string) string { return filepath.Join(tr.root, filepath.FromSlash(rel)) }

func (tr *tree) write(rel, content string) {
	tr.t.Helper()
	mustWrite(tr.t, tr.abs(rel), content)
}

// files lists the regular files Hash counts, sorted.
func (tr *tree) files() []string {
	tr.t.Helper()
	var out []string
	err := filepath.WalkDir(tr.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			return fs.SkipDir
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(tr.root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		tr.t.Fatal(err)
	}
	return out
}

func (tr *tree) pick() string {
	tr.t.Helper()
	fs := tr.files()
	if len(fs) == 0 {
		tr.t.Fatal("tree has no files left")
	}
	return fs[tr.rnd.IntN(len(fs))]
}

// rewriteSameSize gives the file rel other content of the same size,
// written through the name through (rel itself or another link to it), and
// puts its mtime back, through that name too (the kernel reports both to
// the directory of the name used): only the ctime and the content tell.
func (tr *tree) rewriteSameSize(rel, through string) {
	tr.t.Helper()
	fi, err := os.Stat(tr.abs(rel))
	if err != nil {
		tr.t.Fatal(err)
	}
	old, err := os.ReadFile(tr.abs(rel))
	if err != nil {
		tr.t.Fatal(err)
	}
	next := []byte(tr.content(len(old)))
	next[0] = old[0] ^ 0x20 // differ for sure
	if err := os.WriteFile(tr.abs(through), next, 0o644); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Chtimes(tr.abs(through), fi.ModTime(), fi.ModTime()); err != nil {
		tr.t.Fatal(err)
	}
}

// change is one thing a command can do to a workspace; same says whether
// Hash's digest must stay the same.
type change struct {
	name string
	same bool
	do   func(tr *tree)
}

func changes() []change {
	return []change{
		{"content, same size, mtime put back", false, func(tr *tree) {
			rel := tr.pick()
			tr.rewriteSameSize(rel, rel)
		}},
		{"new file", false, func(tr *tree) { tr.write(tr.newPath(), tr.content(10)) }},
		{"deleted file", false, func(tr *tree) {
			if err := os.Remove(tr.abs(tr.pick())); err != nil {
				tr.t.Fatal(err)
			}
		}},
		{"renamed file", false, func(tr *tree) {
			to := tr.newPath()
			mustMkdir(tr.t, filepath.Dir(tr.abs(to)))
			if err := os.Rename(tr.abs(tr.pick()), tr.abs(to)); err != nil {
				tr.t.Fatal(err)
			}
		}},
		{"symlink added", true, func(tr *tree) {
			link := tr.abs(tr.newPath())
			mustMkdir(tr.t, filepath.Dir(link))
			mustSymlink(tr.t, filepath.Base(tr.pick()), link)
		}},
		{"symlink changed", true, func(tr *tree) {
			link := tr.abs(tr.newPath())
			mustMkdir(tr.t, filepath.Dir(link))
			mustSymlink(tr.t, "nowhere", link)
			if err := os.Remove(link); err != nil {
				tr.t.Fatal(err)
			}
			mustSymlink(tr.t, filepath.Base(tr.pick()), link)
		}},
		{"file in a new directory", false, func(tr *tree) {
			tr.write(fmt.Sprintf("new%d/deep/%s", tr.rnd.IntN(1e6), filepath.Base(tr.newPath())), "x")
		}},
		{"file replaced by a directory", false, func(tr *tree) {
			rel := tr.pick()
			if err := os.Remove(tr.abs(rel)); err != nil {
				tr.t.Fatal(err)
			}
			tr.write(rel+"/inside", "y")
		}},
		{"directory renamed", false, func(tr *tree) {
			dir := filepath.Dir(tr.pick())
			if dir == "." {
				mustMkdir(tr.t, tr.abs("moving"))
				tr.write("moving/f", "m")
				dir = "moving"
			}
			to := fmt.Sprintf("moved%d", tr.rnd.IntN(1e6))
			if err := os.Rename(tr.abs(dir), tr.abs(to)); err != nil {
				tr.t.Fatal(err)
			}
		}},
		{"directory removed", false, func(tr *tree) {
			dir := filepath.Dir(tr.pick())
			if dir == "." {
				dir = tr.pick() // a file at the top: that goes instead
			}
			if err := os.RemoveAll(tr.abs(dir)); err != nil {
				tr.t.Fatal(err)
			}
			if len(tr.files()) == 0 {
				tr.write("again", "a")
			}
		}},
		{"hard link made and written through, same size, mtime put back", false, func(tr *tree) {
			rel := tr.pick()
			link := tr.newPath()
			mustMkdir(tr.t, filepath.Dir(tr.abs(link)))
			if err := os.Link(tr.abs(rel), tr.abs(link)); err != nil {
				tr.t.Fatal(err)
			}
			tr.rewriteSameSize(rel, link)
		}},
		{"permission only", true, func(tr *tree) {
			if err := os.Chmod(tr.abs(tr.pick()), 0o600); err != nil {
				tr.t.Fatal(err)
			}
		}},
	}
}

// TestHasherMatchesHash applies each change right after a cached hash, in a
// random order over several random trees, and checks that the cached digest
// is Hash's every time. With the real clock every file and directory is
// younger than the racy margin, so the Hasher re-reads them all; with the
// clock an hour ahead they count as old and only their stat data tells what
// changed (a pause of a clock tick before each change keeps its timestamps
// apart from what the last walk saw, which is the racy rule's job).
//
// Watched, each walk follows the one before (HashSince), so the Hasher
// lstat's only the directories the kernel reported changed.
func TestHasherMatchesHash(t *testing.T) {
	for _, mode := range []struct {
		name  string
		ahead time.Duration
		pause time.Duration
		watch bool
	}{
		{"fresh files", 0, 0, false}, {"old files", time.Hour, 20 * time.Millisecond, false},
		{"watched/fresh files", 0, 0, true}, {"watched/old files", time.Hour, 20 * time.Millisecond, true},
		{"watched, this host/old files", time.Hour, 20 * time.Millisecond, true},
	} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed%d", mode.name, seed), func(t *testing.T) {
				t.Parallel()
				tr := newRandomTree(t, seed, 40)
				h := NewHasher(1 << 20)
				h.now = func() time.Time { return time.Now().Add(mode.ahead) }
				hashing := newHashing(t, h, mode.watch)
				if strings.Contains(mode.name, "this host") {
					// Every walk trusts the watcher, whatever the tags.
					h.TrustHost()
					hashing.unrelated = true
				}
				mustHasher := hashing.next
				prev := mustHasher(t, h, tr.root)
				if want := mustHash(t, tr.root); prev != want {
					t.Fatalf("first walk: Hasher %s, Hash %s", prev, want)
				}
				for round := range 3 {
					cs := changes()
					tr.rnd.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
					for _, c := range cs {
						time.Sleep(mode.pause)
						c.do(tr)
						got, want := mustHasher(t, h, tr.root), mustHash(t, tr.root)
						if got != want {
							t.Fatalf("round %d, after %q: Hasher %s, Hash %s", round, c.name, got, want)
						}
						if c.same != (got == prev) {
							t.Errorf("round %d, after %q: digest changed %v, want %v", round, c.name, got != prev, !c.same)
						}
						prev = got
					}
				}
			})
		}
	}
}

// TestHasherRacyContent is the change stat data cannot see: same size, the
// mtime put back, within the moment the entry was recorded. Only the racy
// rule makes the Hasher look at the content again.
func TestHasherRacyContent(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "f")
	mustWrite(t, path, "aaaa")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHasher(100)
	first := mustHasher(t, h, root)
	mustWrite(t, path, "bbbb")
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got, want := mustHasher(t, h, root), mustHash(t, root); got != want || got == first {
		t.Fatalf("after a racy rewrite: Hasher %s, Hash %s, before %s", got, want, first)
	}
}

// TestHasherReadsOnlyWhatChanged counts the files and directories read: all
// on the first walk, none when nothing changed, one file (and no directory)
// when one file changed, the one directory when a file came. A file or
// directory younger than the racy margin is read on every walk, so the clock
// is put an hour ahead for the old-tree part.
func TestHasherReadsOnlyWhatChanged(t *testing.T) {
	tr := newRandomTree(t, 42, 30)
	files := int64(len(tr.files()))
	dirs := countDirs(t, tr.root)
	h := NewHasher(1000)
	check := func(what string, wantFiles, wantDirs int64) {
		t.Helper()
		if got, want := mustHasher(t, h, tr.root), mustHash(t, tr.root); got != want {
			t.Fatalf("%s: Hasher %s, Hash %s", what, got, want)
		}
		if got := h.reads.Swap(0); got != wantFiles {
			t.Errorf("%s: read %d files, want %d", what, got, wantFiles)
		}
		if got := h.lists.Swap(0); got != wantDirs {
			t.Errorf("%s: listed %d directories, want %d", what, got, wantDirs)
		}
	}
	check("first walk", files, dirs)
	check("young tree, second walk", files, dirs)

	h.now = func() time.Time { return time.Now().Add(time.Hour) }
	check("old tree, first walk", files, dirs)
	check("old tree, unchanged", 0, 0)
	time.Sleep(20 * time.Millisecond) // a clock tick past what the walk saw
	tr.write(tr.pick(), "changed")
	check("one file changed", 1, 0)
	time.Sleep(20 * time.Millisecond)
	tr.write("a/b/new", "new")
	check("one file came", 1, 1)
}

// TestHasherWatchedLstatsOnlyWhatChanged counts the directories whose
// entries were lstat'ed when each walk follows the one before with watching
// on: none when nothing changed, the one directory when a file in it
// changed, and every one when the walk does not follow the last (the tag
// differs: another replica or a review may have changed the workspace) or
// when the kernel lost events.
func TestHasherWatchedLstatsOnlyWhatChanged(t *testing.T) {
	tr := newRandomTree(t, 7, 30)
	dirs := func(root string) int64 { return countDirs(t, root) }
	h := NewHasher(1000)
	h.now = func() time.Time { return time.Now().Add(time.Hour) }
	if err := h.WatchChanges(); err != nil {
		t.Fatal(err)
	}
	watch := h.watch
	defer h.Close()
	check := func(what, from, to string, wantDirs, wantFiles int64) {
		t.Helper()
		got, err := h.HashSince(tr.root, from, to)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustHash(t, tr.root); got != want {
			t.Fatalf("%s: Hasher %s, Hash %s", what, got, want)
		}
		if got := h.stats.Swap(0); got != wantDirs {
			t.Errorf("%s: lstat'ed the entries of %d directories, want %d", what, got, wantDirs)
		}
		if got := h.reads.Swap(0); got != wantFiles {
			t.Errorf("%s: read %d files, want %d", what, got, wantFiles)
		}
	}
	check("first walk", "", "1", dirs(tr.root), int64(len(tr.files())))
	if got := watch.watches(); got != int(dirs(tr.root)) {
		t.Errorf("%d watches, want one per directory (%d)", got, dirs(tr.root))
	}
	check("nothing changed", "1", "2", 0, 0)
	time.Sleep(20 * time.Millisecond)
	mustMkdir(t, tr.abs("newdir"))
	check("a directory came", "2", "3", 2, 0) // the top and the new one
	time.Sleep(20 * time.Millisecond)
	tr.write("newdir/changed", "changed")
	check("one file came in it", "3", "4", 1, 1)
	check("nothing changed since", "4", "5", 0, 0)
	check("a walk that does not follow the last", "3", "6", dirs(tr.root), 0)
	h.TrustHost()
	check("this host trusted: a walk that does not follow the last", "3", "6b", 0, 0)
	h.mu.Lock()
	h.host = false
	h.mu.Unlock()
	watch.mu.Lock()
	watch.lost()
	watch.mu.Unlock()
	check("events lost", "6", "7", dirs(tr.root), 0)
	check("nothing changed after the loss", "7", "8", 0, 0)

	if err := os.RemoveAll(tr.abs("a")); err != nil {
		t.Fatal(err)
	}
	check("a tree removed", "8", "9", 1, 0)
	check("nothing changed after the removal", "9", "10", 0, 0)
	if got := watch.watches(); got != int(dirs(tr.root)) {
		t.Errorf("%d watches after the removal, want one per directory (%d)", got, dirs(tr.root))
	}

	// Another root pushes this one out of the cache: its watches go.
	other := newRandomTree(t, 8, 30)
	h.maxFiles = len(other.files()) + 1
	if _, err := h.HashSince(other.root, "", "o1"); err != nil {
		t.Fatal(err)
	}
	if got := watch.watches(); got != int(dirs(other.root)) {
		t.Errorf("%d watches after the first root left the cache, want the other's %d", got, dirs(other.root))
	}
	h.Close()
	if got := watch.watches(); got != 0 {
		t.Errorf("%d watches after Close", got)
	}
	if got, want := mustHasher(t, h, other.root), mustHash(t, other.root); got != want {
		t.Errorf("after Close: Hasher %s, Hash %s", got, want)
	}
}

func TestHasherCarry(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "a")
	h := NewHasher(100)
	if _, ok := h.Carry(root, "s/1", "s/2"); ok {
		t.Fatal("a digest before any walk")
	}
	d1, err := h.HashTagged(root, "s/1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Carry(root, "s/0", "s/2"); ok {
		t.Error("carried a digest from a tag never given")
	}
	if got, ok := h.Carry(root, "s/1", "s/2"); !ok || got != d1 {
		t.Errorf("Carry(s/1, s/2) = %q, %v; want %q", got, ok, d1)
	}
	if got, ok := h.Carry(root, "s/2", "s/3"); !ok || got != d1 {
		t.Errorf("Carry(s/2, s/3) = %q, %v; want %q, carried on", got, ok, d1)
	}
	if _, ok := h.Carry(root, "s/1", "s/4"); ok {
		t.Error("carried from a tag already moved on")
	}
	mustWrite(t, filepath.Join(root, "b"), "b")
	if _, err := h.Hash(root); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Carry(root, "s/3", "s/4"); ok {
		t.Error("carried the tag of a walk older than the last one")
	}
	if _, ok := h.Carry(root, "", "s/4"); ok {
		t.Error("carried from the empty tag of an untagged walk")
	}
}

// TestHasherEvicts keeps the cached files under the bound: hashing a second
// root evicts the first, which is then read whole again.
func TestHasherEvicts(t *testing.T) {
	a, b := newRandomTree(t, 1, 20), newRandomTree(t, 2, 20)
	h := NewHasher(30)
	h.now = func() time.Time { return time.Now().Add(time.Hour) }
	mustHasher(t, h, a.root)
	mustHasher(t, h, a.root)
	if got := h.reads.Swap(0); got != int64(len(a.files())) {
		t.Fatalf("read %d files, want %d (one walk's worth)", got, len(a.files()))
	}
	mustHasher(t, h, b.root)
	h.reads.Store(0)
	if got, want := mustHasher(t, h, a.root), mustHash(t, a.root); got != want {
		t.Fatalf("Hasher %s, Hash %s", got, want)
	}
	if got := h.reads.Swap(0); got != int64(len(a.files())) {
		t.Errorf("evicted root: read %d files, want all %d", got, len(a.files()))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lru.Len() != 1 || h.files > 30 {
		t.Errorf("%d roots and %d files cached, want 1 root within 30 files", h.lru.Len(), h.files)
	}
}

// TestHasherConcurrent hashes two roots from several goroutines while one of
// them changes (run it with -race).
func TestHasherConcurrent(t *testing.T) {
	a, b := newRandomTree(t, 3, 20), newRandomTree(t, 4, 20)
	wantB := mustHash(t, b.root)
	h := NewHasher(1000)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				root := a.root
				if i%2 == 1 {
					root = b.root
				}
				got, err := h.Hash(root)
				if err != nil {
					errs <- err
					return
				}
				if root == b.root && got != wantB {
					errs <- fmt.Errorf("b: Hasher %s, Hash %s", got, wantB)
				}
			}
		})
	}
	for range 5 {
		a.write(a.newPath(), "more")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := mustHasher(t, h, a.root), mustHash(t, a.root); got != want {
		t.Errorf("a after the writes: Hasher %s, Hash %s", got, want)
	}
}

func TestHasherSymlinkedRoot(t *testing.T) {
	tr := newRandomTree(t, 7, 10)
	link := filepath.Join(t.TempDir(), "link")
	mustSymlink(t, tr.root, link)
	h := NewHasher(100)
	if got, want := mustHasher(t, h, link), mustHash(t, tr.root); got != want {
		t.Errorf("through a symlink: Hasher %s, Hash of the real root %s", got, want)
	}
	tr.write(tr.newPath(), "more")
	if got, want := mustHasher(t, h, tr.root), mustHash(t, link); got != want {
		t.Errorf("the real root after a change: Hasher %s, Hash through the symlink %s", got, want)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lru.Len() != 1 {
		t.Errorf("%d roots cached for one workspace reached two ways, want 1", h.lru.Len())
	}
}

func TestHasherErrors(t *testing.T) {
	h := NewHasher(10)
	if _, err := h.Hash(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing root: err %v, want one naming it", err)
	}
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "locked", "f"), "x")
	mustWrite(t, filepath.Join(root, "ok"), "x")
	if err := os.Chmod(filepath.Join(root, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Join(root, "locked"), 0o755)
	if os.Getuid() == 0 {
		t.Skip("root reads any directory")
	}
	if _, err := h.Hash(root); err == nil {
		t.Error("an unreadable directory hashed")
	}
	if err := os.Chmod(filepath.Join(root, "locked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, want := mustHasher(t, h, root), mustHash(t, root); got != want {
		t.Errorf("after the failed walk: Hasher %s, Hash %s", got, want)
	}
}

// hashing walks with a Hasher one step after the other: watched, each
// walk is HashSince the one before, as the builder's steps are.
type hashing struct {
	step  int
	watch bool
	// unrelated: each walk's tags follow no earlier walk.
	unrelated bool
}

func newHashing(t *testing.T, h *Hasher, watch bool) *hashing {
	t.Helper()
	if watch {
		if err := h.WatchChanges(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
	}
	return &hashing{watch: watch}
}

func (s *hashing) next(t *testing.T, h *Hasher, root string) string {
	t.Helper()
	if !s.watch {
		return mustHasher(t, h, root)
	}
	s.step++
	from := fmt.Sprint(s.step - 1)
	if s.unrelated {
		from = "elsewhere"
	}
	d, err := h.HashSince(root, from, fmt.Sprint(s.step))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// countDirs counts the directories under root that Hash walks (root
// included, .git left out).
func countDirs(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if d.Name() == ".git" {
			return fs.SkipDir
		}
		if d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustHasher(t *testing.T, h *Hasher, root string) string {
	t.Helper()
	d, err := h.Hash(root)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// BenchmarkHashLargeWorkspace is the workspace check on an 11,000-file tree
// (small files, nested directories): Hash reading everything, the Hasher
// with nothing changed, and the Hasher after one file changed, as a step
// that ran one command sees it, next to that on a one-file workspace. It
// reports ms per call.
func BenchmarkHashLargeWorkspace(b *testing.B) {
	root := b.TempDir()
	const files = 11000
	var paths []string
	for i := range files {
		rel := fmt.Sprintf("pkg%02d/sub%02d/file%05d.go", i%40, (i/40)%12, i)
		paths = append(paths, rel)
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat(fmt.Sprintf("// line of file %d\n", i), 1+i%40)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// Let every file age past the racy margin, as a repository's files have.
	time.Sleep(racyMargin + 100*time.Millisecond)
	slices.Sort(paths)
	want, err := Hash(root)
	if err != nil {
		b.Fatal(err)
	}
	// ms/call is wall time; cpu-ms/call the process's user and system time,
	// which other load on the machine disturbs less.
	cpu := func(b *testing.B) time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// used is the CPU time of the measured calls (outside StopTimer).
	var used time.Duration
	measure := func(b *testing.B, fn func() error) {
		c0 := cpu(b)
		err := fn()
		used += cpu(b) - c0
		if err != nil {
			b.Fatal(err)
		}
	}
	start := func() { used = 0 }
	msPerCall := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/call")
		b.ReportMetric(float64(used.Microseconds())/1000/float64(b.N), "cpu-ms/call")
	}
	hash := func(h *Hasher, root string) func() error {
		return func() error { _, err := h.Hash(root); return err }
	}
	// changeEachCall measures h on root after rewriting changed before
	// each call (outside the timer).
	changeEachCall := func(b *testing.B, h *Hasher, root, changed string) {
		i := 0
		start()
		for b.Loop() {
			i++
			b.StopTimer()
			if err := os.WriteFile(changed, fmt.Appendf(nil, "changed %d\n", i), 0o644); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			measure(b, hash(h, root))
		}
		msPerCall(b)
	}

	b.Run("full Hash", func(b *testing.B) {
		start()
		for b.Loop() {
			measure(b, func() error { _, err := Hash(root); return err })
		}
		msPerCall(b)
	})
	b.Run("Hasher unchanged", func(b *testing.B) {
		h := NewHasher(files)
		if got, err := h.Hash(root); err != nil || got != want {
			b.Fatalf("Hasher %s, %v; Hash %s", got, err, want)
		}
		start()
		for b.Loop() {
			measure(b, hash(h, root))
		}
		msPerCall(b)
	})
	// The floor the target is measured against: a step on a workspace of
	// one file that it changed.
	b.Run("Hasher one-file workspace changed", func(b *testing.B) {
		small := b.TempDir()
		changeEachCall(b, NewHasher(files), small, filepath.Join(small, "main.go"))
	})
	b.Run("Hasher one file changed", func(b *testing.B) {
		h := NewHasher(files)
		if _, err := h.Hash(root); err != nil {
			b.Fatal(err)
		}
		// One file, so that the files a walk re-reads for being younger
		// than the racy margin do not pile up at the benchmark's pace.
		changeEachCall(b, h, root, filepath.Join(root, paths[len(paths)/2]))
	})
	// Watched, each call following the one before as a task's steps do:
	// only the changed file's directory is lstat'ed.
	b.Run("Hasher watched one file changed", func(b *testing.B) {
		h := NewHasher(files)
		if err := h.WatchChanges(); err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		step := 0
		if _, err := h.HashSince(root, "", "0"); err != nil {
			b.Fatal(err)
		}
		changed := filepath.Join(root, paths[len(paths)/3])
		start()
		for b.Loop() {
			step++
			b.StopTimer()
			if err := os.WriteFile(changed, fmt.Appendf(nil, "changed %d\n", step), 0o644); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			measure(b, func() error {
				got, err := h.HashSince(root, fmt.Sprint(step-1), fmt.Sprint(step))
				if err == nil && got == want {
					err = errors.New("the change was not seen")
				}
				return err
			})
		}
		msPerCall(b)
	})
}

// Close while walks run (a builder stopping): every walk still returns
// Hash's digest, and the ones after it walk without watching.
func TestHasherCloseWhileWalking(t *testing.T) {
	tr := newRandomTree(t, 11, 40)
	want := mustHash(t, tr.root)
	h := NewHasher(1000)
	if err := h.WatchChanges(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				got, err := h.HashSince(tr.root, fmt.Sprint(g, i-1), fmt.Sprint(g, i))
				if err == nil && got != want {
					err = fmt.Errorf("Hasher %s, Hash %s", got, want)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	h.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := mustHasher(t, h, tr.root); got != want {
		t.Errorf("after Close: Hasher %s, Hash %s", got, want)
	}
}
