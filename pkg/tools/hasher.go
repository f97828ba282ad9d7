package tools

// This file is the cached form of Hash: a stat cache per workspace, so that
// a step re-reads only the files it changed.

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// racyMargin is how much older than the walk that recorded it a file's
// mtime and ctime must be for its cached digest to be trusted.
//
// This is git's "racy git" rule (Documentation/technical/racy-git.txt): a
// file modified within the timestamp granularity of the moment it was
// recorded can change again without its stat data changing (same size, same
// mtime tick, and with os.Chtimes even an old mtime), so git treats an index
// entry whose mtime is not older than the index file itself as "racily
// clean" and compares its content instead of trusting the stat data. The
// margin covers the filesystem's granularity (2 s on FAT, 1 s on some
// network filesystems, a kernel tick of coarse clock lag on ext4 and tmpfs)
// and small clock skew with a file server; a file younger than that is
// re-read on every walk until it ages.
const racyMargin = 2 * time.Second

// Hasher computes what Hash computes, re-reading only the files whose stat
// data changed since it last saw them. It keeps, for each workspace root, the
// size, mtime, ctime, inode, device, mode and content digest of every regular
// file; a call walks the tree with readdir and lstat only.
//
// It is safe for concurrent use: walks of one root are serialised, walks of
// different roots run in parallel. Memory is bounded by maxFiles cached
// files across all roots, the least recently hashed roots going first (one
// root larger than that is still cached, alone).
type Hasher struct {
	maxFiles int
	bufs     sync.Pool // *[]byte: 32 KiB for reading a file or a directory
	now      func() time.Time

	mu    sync.Mutex
	roots map[string]*list.Element // real root -> element holding *rootCache
	lru   *list.List               // front: most recently used
	files int                      // cached files across roots

	// watch, when set (WatchChanges), tells which directories changed
	// between two walks of a root (hashwatch.go); host: it sees every
	// writer (TrustHost).
	watch *watcher
	host  bool

	// reads counts files whose content was read, lists directories whose
	// entries were read, stats directories whose entries were lstat'ed, for
	// the tests.
	reads, lists, stats atomic.Int64
}

// NewHasher returns a Hasher that remembers up to maxFiles files across
// workspaces (at least one workspace is always remembered whole).
func NewHasher(maxFiles int) *Hasher {
	h := &Hasher{maxFiles: maxFiles, now: time.Now, roots: map[string]*list.Element{}, lru: list.New()}
	h.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	return h
}

// rootCache is what a Hasher knows of one workspace.
type rootCache struct {
	root string

	mu      sync.Mutex // held for a whole walk
	dirs    map[string]*dirCache
	order   []*fileEntry // sorted by path, rebuilt when a file came or went
	digest  string       // of the last walk
	tag     string       // what the caller named the last walk
	sum     hash.Hash    // of the record stream
	gen     uint64
	stale   bool // the next walk rebuilds order and digest
	files   int  // entries counted in Hasher.files
	evicted bool // dropped from the Hasher (under Hasher.mu)
}

// dirCache is what a Hasher knows of one directory: its files by name, so
// that a walk looks entries up with the names readdir returns without
// building paths, and its listing. A directory's mtime and ctime change when
// an entry is added, removed or renamed in it, so while its stat data stays
// the same (and is not racy) the listing stands and readdir is skipped, as
// git's untracked cache does; the entries are still lstat'ed one by one.
type dirCache struct {
	files map[string]*fileEntry
	gen   uint64
	stat  fileStat
	racy  bool
	names []string // the listing, .git left out; nil when not listed yet
	// subdirs are the directories among names, as the last lstat found
	// them; unsure: a file in it is hard-linked or racy, so that only its
	// stat data tells (never skipped on a watcher's word).
	subdirs []string
	unsure  bool
}

type fileEntry struct {
	rel   string // workspace-relative, slash-separated
	stat  fileStat
	sum   [sha256.Size]byte
	racy  bool // the stat data cannot vouch for the content: re-read next walk
	gen   uint64
	valid bool // sum holds the content digest
}

// fileStat is the stat data that, unchanged and not racy, vouches for the
// content.
type fileStat struct {
	size, mtime, ctime int64
	ino, dev           uint64
	mode               uint32
}

func statOf(st *unix.Stat_t) fileStat {
	return fileStat{
		size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
		ino: st.Ino, dev: st.Dev, mode: st.Mode,
	}
}

// Hash returns Hash(root): the same digest for the same tree, computed by
// reading only the files whose stat data changed (or was too recent to
// trust) since the last call for root.
func (h *Hasher) Hash(root string) (string, error) {
	return h.HashTagged(root, "")
}

// HashTagged is Hash, remembering tag as the name of this moment of the
// workspace (the builder uses session/task/attempt/step) for Carry and
// HashSince.
func (h *Hasher) HashTagged(root, tag string) (string, error) {
	return h.HashSince(root, "", tag)
}

// HashSince is HashTagged(root, to) where the caller vouches that only
// this host changed the workspace since the walk tagged from: with
// WatchChanges on, if that walk was this Hasher's last of root, only the
// directories the kernel reported changed are lstat'ed.
func (h *Hasher) HashSince(root, from, to string) (string, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("hashing workspace %q: %w", root, err)
	}
	rc := h.cache(real)
	rc.mu.Lock()
	digest, err := h.walk(rc, from != "" && rc.tag == from && rc.digest != "", false)
	if errors.Is(err, errRewalk) {
		// What the first walk updated stays (it is what it read), but the
		// file list and digest are made again whatever the second finds.
		rc.stale = true
		digest, err = h.walk(rc, false, true)
	}
	if err != nil {
		// A failed walk leaves entries of this generation half-updated;
		// start over next time rather than reason about them.
		rc.dirs, rc.order, rc.digest, rc.tag = nil, nil, "", ""
	} else {
		rc.tag = to
	}
	files := rc.countFiles()
	rc.mu.Unlock()
	h.account(rc, files)
	if err != nil {
		return "", fmt.Errorf("hashing workspace %q: %w", root, err)
	}
	return digest, nil
}

// Carry returns the digest of the last walk of root without walking, if
// that walk was tagged from, and tags it to as well: the caller vouches that
// nothing changed the workspace since. The builder carries the digest of the
// step before to a step that ran no command and wrote nothing.
func (h *Hasher) Carry(root, from, to string) (string, bool) {
	if from == "" {
		return "", false
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", false
	}
	h.mu.Lock()
	el, ok := h.roots[real]
	h.mu.Unlock()
	if !ok {
		return "", false
	}
	rc := el.Value.(*rootCache)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.tag != from || rc.digest == "" {
		return "", false
	}
	rc.tag = to
	return rc.digest, true
}

// cache returns root's cache, creating it, and marks it most recently used.
func (h *Hasher) cache(real string) *rootCache {
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.roots[real]; ok {
		h.lru.MoveToFront(el)
		return el.Value.(*rootCache)
	}
	rc := &rootCache{root: real, sum: sha256.New()}
	h.roots[real] = h.lru.PushFront(rc)
	return rc
}

// account records that rc now caches files files and evicts the least
// recently used roots while the total is over the bound.
func (h *Hasher) account(rc *rootCache, files int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rc.evicted {
		return
	}
	h.files += files - rc.files
	rc.files = files
	for h.files > h.maxFiles && h.lru.Len() > 1 {
		el := h.lru.Back()
		if el.Value.(*rootCache) == rc {
			break
		}
		old := h.lru.Remove(el).(*rootCache)
		delete(h.roots, old.root)
		old.evicted = true
		h.files -= old.files
		if h.watch != nil {
			h.watch.unwatch(old)
		}
	}
}

func (rc *rootCache) countFiles() int {
	n := 0
	for _, d := range rc.dirs {
		n += len(d.files)
	}
	return n
}

// errRewalk: a directory the watcher vouched for could not be opened; the
// walk starts over, lstat'ing everything.
var errRewalk = errors.New("a directory without events is gone: walk everything")

// walk brings rc up to date with the tree and returns its digest. It holds
// rc.mu. since: the caller vouches that this walk follows rc's last one
// with only this host's changes in between (HashSince); whole: lstat
// everything, whatever the watcher says.
func (h *Hasher) walk(rc *rootCache, since, whole bool) (string, error) {
	if rc.dirs == nil {
		rc.dirs = map[string]*dirCache{}
	}
	rc.gen++
	h.mu.Lock()
	watch := h.watch // one watcher for the whole walk, even if Close comes
	since = (since || (h.host && rc.digest != "")) && !whole
	h.mu.Unlock()
	w := walker{h: h, rc: rc, since: h.now().Add(-racyMargin).UnixNano(), watch: watch,
		s: &walkShared{slots: make(chan struct{}, walkWorkers()-1)}}
	if watch != nil {
		var trusted bool
		w.dirty, trusted = watch.begin(rc)
		w.trusted = trusted && since
	}
	w.s.fail(w.enter(-1, "", ""))
	w.s.wg.Wait()
	if w.s.err != nil {
		return "", w.s.err
	}
	structure, content := w.s.structure.Load(), w.s.content.Load()
	// What is no longer there: directories and files this walk did not see.
	for rel, d := range rc.dirs {
		if d.gen != rc.gen {
			delete(rc.dirs, rel)
			if watch != nil {
				watch.forget(rc, rel)
			}
			structure = true
			continue
		}
		for name, f := range d.files {
			if f.gen != rc.gen {
				delete(d.files, name)
				structure = true
			}
		}
	}
	if rc.stale {
		structure, rc.stale = true, false
	}
	if structure {
		rc.order = rc.order[:0]
		for _, d := range rc.dirs {
			for _, f := range d.files {
				rc.order = append(rc.order, f)
			}
		}
		slices.SortFunc(rc.order, func(a, b *fileEntry) int { return strings.Compare(a.rel, b.rel) })
	} else if !content && rc.digest != "" {
		return rc.digest, nil
	}
	// The record stream of Hash, byte for byte.
	sum := rc.sum
	sum.Reset()
	var line []byte
	for _, f := range rc.order {
		line = append(line[:0], f.rel...)
		line = append(line, 0)
		line = hex.AppendEncode(line, f.sum[:])
		line = append(line, '\n')
		sum.Write(line)
	}
	rc.digest = "sha256:" + hex.EncodeToString(sum.Sum(nil))
	return rc.digest, nil
}

// walkWorkers is how many goroutines one walk lstat's with: the system
// calls of directories of the tree run in parallel, as many as there are
// processors (at most 8).
func walkWorkers() int { return min(8, max(1, runtime.GOMAXPROCS(0))) }

// walkShared is what the goroutines of one walk share: the root's directory
// map, which they all read and add to (each directory's cache is touched by
// the one goroutine that walks it), the free worker slots, and what they
// found.
type walkShared struct {
	mu     sync.Mutex // guards rc.dirs and err
	slots  chan struct{}
	wg     sync.WaitGroup
	failed atomic.Bool
	err    error
	// structure: a file came or went; content: a cached digest changed.
	structure, content atomic.Bool
}

// errStopped: another goroutine of the walk failed; this one gave up.
var errStopped = errors.New("walk stopped")

// fail records the walk's first error.
func (s *walkShared) fail(err error) {
	if err == nil || errors.Is(err, errStopped) {
		return
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		s.failed.Store(true)
	}
	s.mu.Unlock()
}

// dirOf is the cache of rel, created when create is set and there is none.
func (w *walker) dirOf(rel string, create bool) *dirCache {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	dc := w.rc.dirs[rel]
	if dc == nil && create {
		dc = &dirCache{files: map[string]*fileEntry{}}
		w.rc.dirs[rel] = dc
	}
	return dc
}

// walker is one goroutine of a walk of a root.
type walker struct {
	s     *walkShared
	h     *Hasher
	rc    *rootCache
	file  hash.Hash // of one file's content
	since int64     // stat times at or after this are racy
	st    unix.Stat_t
	// watch is the Hasher's watcher when the walk began (nil: none);
	// trusted: its word counts for this walk, and dirty are the directories
	// it reported changed.
	watch   *watcher
	trusted bool
	dirty   map[string]bool
}

// enter brings the directory rel up to date: without a system call when
// the watcher vouches that nothing in it changed, else opened (from
// parentfd by name, or by path when parentfd < 0), watched and walked, by
// another goroutine when a worker slot is free.
func (w *walker) enter(parentfd int, rel, name string) error {
	if w.s.failed.Load() {
		return errStopped
	}
	if dc := w.dirOf(rel, false); dc != nil && w.clean(dc, rel) {
		dc.gen = w.rc.gen
		for _, f := range dc.files {
			f.gen = w.rc.gen
		}
		for _, sub := range dc.subdirs {
			if err := w.enter(-1, join(rel, sub), sub); err != nil {
				return err
			}
		}
		return nil
	}
	var fd int
	var err error
	switch {
	case rel == "":
		fd, err = unix.Open(w.rc.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: w.rc.root, Err: err}
		}
	case parentfd < 0:
		// Below a directory the watcher vouched for: nothing moved on
		// the way here, or it would have said so.
		fd, err = unix.Open(w.rc.root+"/"+rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return errRewalk
		}
	default:
		fd, err = unix.Openat(parentfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open directory %s: %w", rel, err)
		}
	}
	if rel != "" {
		select {
		case w.s.slots <- struct{}{}:
			w.s.wg.Add(1)
			go func() {
				defer w.s.wg.Done()
				sub := walker{s: w.s, h: w.h, rc: w.rc, since: w.since, watch: w.watch, trusted: w.trusted, dirty: w.dirty}
				err := sub.visit(fd, rel)
				<-w.s.slots
				w.s.fail(err)
			}()
			return nil
		default:
		}
	}
	return w.visit(fd, rel)
}

// visit walks the directory rel open as fd, and closes it.
func (w *walker) visit(fd int, rel string) error {
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &w.st); err != nil {
		return &os.PathError{Op: "fstat", Path: rel, Err: err}
	}
	// Watched before it is listed: a change after the listing is an event.
	if w.watch != nil {
		w.watch.add(w.rc, fd, rel)
	}
	return w.dir(fd, rel, statOf(&w.st))
}

// clean reports whether the watcher vouches that nothing changed in the
// directory rel, walked before as dc.
func (w *walker) clean(dc *dirCache, rel string) bool {
	return w.trusted && dc.names != nil && !dc.racy && !dc.unsure && !w.dirty[rel] && w.watch.watched(w.rc, rel)
}

func (w *walker) racy(st fileStat) bool { return st.mtime >= w.since || st.ctime >= w.since }

// dir walks the directory open as fd, rel to the root ("" for the root),
// whose stat data is st.
func (w *walker) dir(fd int, rel string, st fileStat) error {
	dc := w.dirOf(rel, true)
	dc.gen = w.rc.gen
	if dc.names == nil || dc.racy || dc.stat != st {
		names, err := w.list(fd)
		if err != nil {
			return fmt.Errorf("read directory %s: %w", rel, err)
		}
		dc.names, dc.stat, dc.racy = names, st, w.racy(st)
	}
	w.h.stats.Add(1)
	dc.subdirs, dc.unsure = dc.subdirs[:0], dc.racy
	for _, name := range dc.names {
		if err := unix.Fstatat(fd, name, &w.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("lstat %s: %w", join(rel, name), err)
		}
		switch w.st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			dc.subdirs = append(dc.subdirs, name)
		case unix.S_IFREG:
			if w.st.Nlink > 1 {
				// A write through another name of the file is reported
				// to that name's directory only: a link that is new or
				// changed means any directory may hold a changed file.
				if e := dc.files[name]; w.trusted && (e == nil || e.stat != statOf(&w.st)) {
					return errRewalk
				}
				dc.unsure = true
			}
			if err := w.file1(dc, fd, rel, name); err != nil {
				return err
			}
			if dc.files[name].racy {
				dc.unsure = true
			}
		}
		// Symlinks, sockets, devices and pipes are not content.
	}
	for _, name := range dc.subdirs {
		if err := w.enter(fd, join(rel, name), name); err != nil {
			return err
		}
	}
	return nil
}

// list returns the names in the directory open as fd, .git left out (git
// bookkeeping, as in Hash).
func (w *walker) list(fd int) ([]string, error) {
	w.h.lists.Add(1)
	bp := w.h.bufs.Get().(*[]byte)
	defer w.h.bufs.Put(bp)
	dents := *bp
	names := []string{}
	for {
		n, err := unix.Getdents(fd, dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(dents[:n], -1, names)
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == ".git" }), nil
}

// file1 brings the entry of the regular file name in the directory open as
// fd, just lstat'ed into w.st, up to date.
func (w *walker) file1(dc *dirCache, fd int, rel, name string) error {
	st := statOf(&w.st)
	e := dc.files[name]
	if e == nil {
		e = &fileEntry{rel: join(rel, name)}
		dc.files[name] = e
		w.s.structure.Store(true)
	}
	e.gen = w.rc.gen
	if e.valid && !e.racy && e.stat == st {
		return nil
	}
	sum, err := w.read(fd, name)
	if err != nil {
		return fmt.Errorf("file %s: %w", e.rel, err)
	}
	if !e.valid || sum != e.sum {
		w.s.content.Store(true)
	}
	e.sum, e.stat, e.valid = sum, st, true
	e.racy = w.racy(st)
	return nil
}

// read returns the SHA-256 of the file name in the directory open as dirfd,
// reading it through a pooled buffer (io.Copy would take a fresh 32 KiB per
// file: *os.File's WriteTo falls back to a plain copy for a hash).
func (w *walker) read(dirfd int, name string) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	w.h.reads.Add(1)
	// O_NONBLOCK: should a fifo have taken the file's place since the
	// lstat, the open must not wait for a writer.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return out, err
	}
	defer unix.Close(fd)
	if w.file == nil {
		w.file = sha256.New()
	}
	sum := w.file
	sum.Reset()
	bp := w.h.bufs.Get().(*[]byte)
	defer w.h.bufs.Put(bp)
	buf := *bp
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if n <= 0 {
			break
		}
		sum.Write(buf[:n])
	}
	sum.Sum(out[:0])
	return out, nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
