package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/units"
)

// A commit appends, saves under compare-and-set, marks the session active
// and reads its usage, in one round trip; a peek then sees both versions
// and the step's journal, in one more.
func TestCommitAndPeek(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	var trips store.RoundTrips
	e.rdb.AddHook(&trips)
	if err := e.st.RecordUsage(ctx, "s", "builder", 10, 2); err != nil {
		t.Fatal(err)
	}
	if err := e.st.JournalPut(ctx, "s", 3, "llm", map[string]string{"content": "hi"}); err != nil {
		t.Fatal(err)
	}
	before := trips.Count()
	now := time.UnixMilli(1_700_000_000_000)
	got, err := e.st.Commit(ctx, store.Commit{Session: "s", Scope: "T1", Units: []units.Unit{unit("u1", "one"), unit("u2", "two")},
		Expect: 0, State: state{Phase: "analyzing", Count: 1}, Now: now, Usage: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := trips.Count() - before; n != 1 {
		t.Errorf("commit took %d round trips, want 1", n)
	}
	if got.Version != 1 || got.Added != 2 || got.ContextVersion != 1 || got.Usage["builder:input"] != 10 {
		t.Errorf("commit: %+v", got)
	}
	if last, found, err := e.st.LastActive(ctx, "s"); err != nil || !found || !last.Equal(now) {
		t.Errorf("activity: %v %v %v", last, found, err)
	}

	before = trips.Count()
	p, err := e.st.Peek(ctx, "s", "T1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if n := trips.Count() - before; n != 1 {
		t.Errorf("peek took %d round trips, want 1", n)
	}
	var reply map[string]string
	if p.StateVersion != 1 || p.ContextVersion != 1 {
		t.Errorf("peek: %+v", p)
	}
	if found, err := p.JournalValue("llm", &reply); err != nil || !found || reply["content"] != "hi" {
		t.Errorf("journal llm: %v %v %v", reply, found, err)
	}
	if found, err := p.JournalValue("tool:0", &reply); err != nil || found {
		t.Errorf("journal tool:0: found %v, %v", found, err)
	}

	// A redelivered commit at the old version appends nothing and
	// conflicts; the state is left as the first commit saved it.
	got, err = e.st.Commit(ctx, store.Commit{Session: "s", Scope: "T1", Units: []units.Unit{unit("u1", "one"), unit("u2", "two")},
		Expect: 0, State: state{Phase: "other"}, Now: now, Ended: true})
	if !errors.Is(err, store.ErrConflict) || got.Added != 0 || got.ContextVersion != 1 {
		t.Fatalf("stale commit: %+v, %v", got, err)
	}
	var st state
	if ver, err := e.st.LoadState(ctx, "s", &st); err != nil || ver != 1 || st.Phase != "analyzing" {
		t.Errorf("state after a conflict: %d %+v %v", ver, st, err)
	}
	if us, ver, err := e.st.Context(ctx, "s", "T1"); err != nil || ver != 1 || len(us) != 2 {
		t.Errorf("context: %v %d %v", ids(us), ver, err)
	}

	// A session that ended leaves the activity index.
	if _, err := e.st.Commit(ctx, store.Commit{Session: "s", Expect: 1, State: state{Phase: "completed"}, Ended: true}); err != nil {
		t.Fatal(err)
	}
	if _, found, err := e.st.LastActive(ctx, "s"); err != nil || found {
		t.Errorf("an ended session is still active: %v %v", found, err)
	}
	if p, err := e.st.Peek(ctx, "none", "T1", 1); err != nil || p.StateVersion != 0 || p.ContextVersion != 0 || len(p.Journal) != 0 {
		t.Errorf("peek of no session: %+v %v", p, err)
	}
}

// Of two deliveries that race to start a command, one claims it.
func TestJournalClaim(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	first, err := e.st.JournalClaim(ctx, "s", 1, "start:0", "a")
	if err != nil || !first {
		t.Fatalf("first claim: %v %v", first, err)
	}
	second, err := e.st.JournalClaim(ctx, "s", 1, "start:0", "b")
	if err != nil || second {
		t.Fatalf("second claim: %v %v", second, err)
	}
	var v string
	if found, err := e.st.JournalGet(ctx, "s", 1, "start:0", &v); err != nil || !found || v != "a" {
		t.Errorf("claimed value %q %v %v, want the first", v, found, err)
	}
}

// A model reply is journaled and counted in the session's usage together,
// in one round trip.
func TestJournalReply(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	var trips store.RoundTrips
	e.rdb.AddHook(&trips)
	// A first call dials, and the connection's handshake is no call's.
	if err := e.st.JournalReply(ctx, "s", 1, "llm", "", "builder", 0, 0); err != nil {
		t.Fatal(err)
	}
	before := trips.Count()
	if err := e.st.JournalReply(ctx, "s", 2, "llm", "the reply", "builder", 100, 7); err != nil {
		t.Fatal(err)
	}
	if n := trips.Count() - before; n != 1 {
		t.Errorf("%d round trips, want 1", n)
	}
	var v string
	if found, err := e.st.JournalGet(ctx, "s", 2, "llm", &v); err != nil || !found || v != "the reply" {
		t.Errorf("journal: %q %v %v", v, found, err)
	}
	usage, err := e.st.Usage(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if usage["builder:input"] != 100 || usage["builder:output"] != 7 || usage["builder:calls"] != 2 {
		t.Errorf("usage %v", usage)
	}
}
