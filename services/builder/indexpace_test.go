package builder

import (
	"fmt"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/sessionindex"
)

// The index pacer writes a session's first entry, its end and any change of
// a task at once; progress in between waits, and what is written when the
// interval is up is the latest entry, never one a later write replaced.
func TestIndexPacer(t *testing.T) {
	var p indexPacer
	flushed := make(chan sessionindex.Entry, 10)
	flush := func(e sessionindex.Entry) { flushed <- e }
	entry := func(iterations int, status string) sessionindex.Entry {
		return sessionindex.Entry{Summary: sessionindex.Summary{ID: "s1", State: sessionindex.StateRunning, CurrentTask: "T1", Iterations: iterations},
			Tasks: []sessionindex.Task{{ID: "T1", Status: status}}}
	}
	const interval = 50 * time.Millisecond
	if !p.hold("k", entry(1, "active"), false, interval, flush) {
		t.Fatal("the first entry waited")
	}
	if p.hold("k", entry(2, "active"), false, interval, flush) || p.hold("k", entry(3, "active"), false, interval, flush) {
		t.Fatal("progress within the interval was written at once")
	}
	select {
	case e := <-flushed:
		if e.Iterations != 3 {
			t.Fatalf("flushed the entry of iteration %d, want the latest (3)", e.Iterations)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting entry was never written")
	}

	if p.hold("k", entry(4, "active"), false, time.Hour, flush) {
		t.Fatal("progress right after a flush was written at once")
	}
	if !p.hold("k", entry(5, "review"), false, time.Hour, flush) {
		t.Fatal("a task's new status waited")
	}
	if p.hold("k", entry(6, "review"), false, time.Hour, flush) {
		t.Fatal("progress after it was written at once")
	}
	if !p.hold("k", entry(7, "done"), true, time.Hour, flush) {
		t.Fatal("the session's end waited")
	}
	if !p.hold("k", entry(8, "done"), false, time.Hour, flush) {
		t.Fatal("an entry after the end was not written at once (the session was not forgotten)")
	}
	if p.hold("k", entry(9, "done"), false, time.Hour, flush) {
		t.Fatal("progress was written at once")
	}
	left := p.drain()
	if len(left) != 1 || left[0].Iterations != 9 {
		t.Fatalf("drain = %+v, want the entry of iteration 9", left)
	}
	if !p.hold("k", entry(10, "done"), false, time.Hour, flush) {
		t.Fatal("after drain an entry waited")
	}
	select {
	case e := <-flushed:
		t.Fatalf("flushed iteration %d, which a later write had replaced", e.Iterations)
	default:
	}
}

// An entry older than the one waiting is dropped, never written in its
// place: the builder writes a commit's entry after its commands, and a
// work-product commit among them holds its own, newer one first.
func TestIndexPacerDropsOlderEntries(t *testing.T) {
	var p indexPacer
	flush := func(e sessionindex.Entry) { t.Errorf("flushed version %d before its interval", e.Version) }
	entry := func(version int64, status string) sessionindex.Entry {
		return sessionindex.Entry{Summary: sessionindex.Summary{ID: "s1", State: sessionindex.StateRunning, CurrentTask: "T1"},
			Tasks: []sessionindex.Task{{ID: "T1", Status: status}}, Version: version}
	}
	if !p.hold("k", entry(5, "active"), false, time.Hour, flush) {
		t.Fatal("the first entry waited")
	}
	if p.hold("k", entry(7, "active"), false, time.Hour, flush) {
		t.Fatal("progress within the interval was written at once")
	}
	if p.hold("k", entry(6, "active"), false, time.Hour, flush) {
		t.Fatal("an entry older than the one waiting was written")
	}
	if p.hold("k", entry(4, "review"), false, time.Hour, flush) {
		t.Fatal("an entry older than the one waiting, of another shape, was written")
	}
	if left := p.drain(); len(left) != 1 || left[0].Version != 7 {
		t.Fatalf("waiting: %+v, want the newest entry (version 7)", left)
	}
}

// Sessions that end elsewhere are not remembered forever: past
// pacedSessions, those with nothing waiting and their interval over go.
func TestIndexPacerForgetsIdleSessions(t *testing.T) {
	var p indexPacer
	flush := func(sessionindex.Entry) {}
	e := sessionindex.Entry{Summary: sessionindex.Summary{State: sessionindex.StateRunning}}
	for i := range pacedSessions + 10 {
		p.hold(fmt.Sprint(i), e, false, time.Nanosecond, flush)
	}
	p.mu.Lock()
	n := len(p.sessions)
	p.mu.Unlock()
	if n > pacedSessions {
		t.Fatalf("%d sessions remembered, want at most %d", n, pacedSessions)
	}
}
