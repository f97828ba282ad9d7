package tools

// This file lets the Hasher skip the lstat of every file of a directory
// nothing changed in, as the kernel tells it (inotify), so that a step on a
// big repository costs what it changed rather than what the repository
// holds.
//
// A directory is watched from before its entries are first listed, through
// /proc/self/fd so that the watch is on the very directory listed: any
// change to it or to a file in it after that reaches the watch. A walk asks
// the watcher which directories had events since the walk before and
// lstat's only those; a directory with no event keeps its cached entries
// without a system call. What the kernel does not report is left to the
// stat walk:
//   - a walk that cannot vouch that the walk before saw the same workspace
//     (the builder's tag of the previous step differs: the session moved
//     between replicas, or a review ran commands since) walks everything,
//     unless every writer runs on this kernel (TrustHost), as does the
//     first walk of a root, and every walk after the kernel's queue
//     overflowed;
//   - a directory with a hard-linked file (a write through another link is
//     reported to the other link's directory only) or a file too recent for
//     its stat data (racyMargin) is lstat'ed on every walk;
//   - changes made by other hosts on a shared filesystem are not seen until
//     a walk that walks everything; a workspace other hosts write into while
//     a session runs should run with watching off
//     (RALPH_BUILDER_HASH_WATCH=off).
//
// One inotify instance serves every root of a Hasher (the kernel allows
// each user only 128), the watches of a root are removed with it, and a
// root whose watches cannot be had (the kernel's max_user_watches) is
// walked whole every time, as without watching.

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what a watched directory reports: any change to an entry's
// content, metadata or name, and the directory itself going away or moving.
const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watcher is a Hasher's inotify instance and what its watches stand for.
type watcher struct {
	fd int

	mu    sync.Mutex
	at    map[int32]watchedDir // watch descriptor -> the directory it watches
	roots map[*rootCache]*rootWatch
	buf   []byte
}

type watchedDir struct {
	rc  *rootCache
	rel string
}

// rootWatch is what the watcher knows of one root since its last walk.
type rootWatch struct {
	wds map[string]int32 // directory (rel) -> its watch
	// dirty are the directories with an event since the last walk;
	// overflow: events were lost, trust nothing.
	dirty    map[string]bool
	overflow bool
	// broken: a watch could not be added; the root is walked whole, and
	// never watched again.
	broken bool
}

func newWatcher() (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	return &watcher{fd: fd, at: map[int32]watchedDir{}, roots: map[*rootCache]*rootWatch{},
		buf: make([]byte, 64<<10)}, nil
}

// WatchChanges makes h learn from the kernel (inotify) which directories
// changed between the walks of a root tagged one after the other (HashSince),
// so that such a walk lstat's only those. An error (no inotify here) leaves
// h walking everything, as before.
func (h *Hasher) WatchChanges() error {
	w, err := newWatcher()
	if err != nil {
		return err
	}
	// The watches go through /proc/self/fd: without /proc there is no
	// watching the directory that was listed.
	probe := "/proc/self/fd/" + strconv.Itoa(w.fd)
	if err := unix.Access(probe, unix.F_OK); err != nil {
		unix.Close(w.fd)
		return fmt.Errorf("inotify: %s: %w (is /proc mounted?)", probe, err)
	}
	h.mu.Lock()
	if h.watch != nil {
		h.mu.Unlock()
		unix.Close(w.fd)
		return nil // watching already
	}
	h.watch = w
	h.mu.Unlock()
	return nil
}

// TrustHost tells h that every process that writes into its workspaces
// runs on this host's kernel (one Docker host, say: the builders and the
// critics in containers of one engine): the watcher sees all their writes,
// so any walk of a root walked before lstat's only what the kernel reported
// changed, whatever the tags (HashSince), and the first step after a review
// or on another replica of this host is as cheap as any.
func (h *Hasher) TrustHost() {
	h.mu.Lock()
	h.host = true
	h.mu.Unlock()
}

// Close stops watching (WatchChanges): the watches go, and walks lstat
// everything from now on. Close it with the service.
func (h *Hasher) Close() {
	h.mu.Lock()
	w := h.watch
	h.watch = nil
	h.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for rc := range w.roots {
		w.unwatchLocked(rc)
		delete(w.roots, rc)
	}
	unix.Close(w.fd)
	w.fd = -1
}

// begin returns what changed in rc since its last walk: the dirty
// directories, and trusted false when the walk must lstat everything (no
// watches yet, events lost, watching broken). It drains the kernel's queue
// for every root first.
func (w *watcher) begin(rc *rootCache) (dirty map[string]bool, trusted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drain()
	rw := w.roots[rc]
	if rw == nil {
		rw = &rootWatch{wds: map[string]int32{}, dirty: map[string]bool{}}
		w.roots[rc] = rw
	}
	dirty, trusted = rw.dirty, !rw.overflow && !rw.broken && len(rw.wds) > 0
	rw.dirty, rw.overflow = map[string]bool{}, false
	return dirty, trusted
}

// drain reads every queued event and marks the directories they name.
func (w *watcher) drain() {
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			// EAGAIN: the queue is empty. Any other error: nothing more
			// can be read; what was lost is what an overflow loses.
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				w.lost()
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			w.event(ev.Wd, ev.Mask)
		}
	}
}

// lost: events were dropped; every root walks everything next.
func (w *watcher) lost() {
	for _, rw := range w.roots {
		rw.overflow = true
	}
}

func (w *watcher) event(wd int32, mask uint32) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.lost()
		return
	}
	d, ok := w.at[wd]
	if !ok {
		return
	}
	rw := w.roots[d.rc]
	if rw == nil {
		return
	}
	rw.dirty[d.rel] = true
	if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
		// The directory at rel is no longer the one watched: rel is
		// listed again (and watched anew) whatever sits there now.
		rw.dirty[parentOf(d.rel)] = true
		if rw.wds[d.rel] == wd {
			delete(rw.wds, d.rel)
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.at, wd)
		}
	}
}

// watched reports whether rel of rc has a watch standing for it.
func (w *watcher) watched(rc *rootCache, rel string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	rw := w.roots[rc]
	if rw == nil || rw.broken {
		return false
	}
	_, ok := rw.wds[rel]
	return ok
}

// add watches the directory open as fd, rel in rc, before it is listed.
// When the kernel refuses (too many watches), rc is no longer watched.
func (w *watcher) add(rc *rootCache, fd int, rel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rw := w.roots[rc]
	if rw == nil || rw.broken {
		return
	}
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		w.unwatchLocked(rc)
		rw.broken = true
		return
	}
	id := int32(wd)
	if old, ok := w.at[id]; ok && old.rc == rc && old.rel != rel {
		// A directory that moved: the watch now stands for its new place.
		if rw.wds[old.rel] == id {
			delete(rw.wds, old.rel)
		}
	}
	w.at[id] = watchedDir{rc: rc, rel: rel}
	rw.wds[rel] = id
}

// forget drops the watch of rel in rc, a directory the walk no longer found.
func (w *watcher) forget(rc *rootCache, rel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rw := w.roots[rc]
	if rw == nil {
		return
	}
	if wd, ok := rw.wds[rel]; ok {
		delete(rw.wds, rel)
		if d := w.at[wd]; d.rc == rc && d.rel == rel {
			delete(w.at, wd)
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
		}
	}
}

// unwatch removes every watch of rc (the root left the Hasher's cache).
func (w *watcher) unwatch(rc *rootCache) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unwatchLocked(rc)
	delete(w.roots, rc)
}

func (w *watcher) unwatchLocked(rc *rootCache) {
	rw := w.roots[rc]
	if rw == nil {
		return
	}
	for rel, wd := range rw.wds {
		if d := w.at[wd]; d.rc == rc {
			delete(w.at, wd)
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
		}
		delete(rw.wds, rel)
	}
}

// watches is the number of watches the watcher holds, for the tests.
func (w *watcher) watches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.at)
}

func parentOf(rel string) string {
	for i := len(rel) - 1; i >= 0; i-- {
		if rel[i] == '/' {
			return rel[:i]
		}
	}
	return ""
}
