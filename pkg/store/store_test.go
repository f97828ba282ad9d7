package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/units"
)

const testTTL = time.Hour

type env struct {
	st     *store.Store
	rdb    redis.UniversalClient
	prefix string
}

// newStore connects to the test Redis and returns a store on a fresh key
// prefix that is removed when the test ends.
func newStore(t *testing.T) env {
	t.Helper()
	ctx := context.Background()
	rdb, err := store.Connect(ctx, meshtest.RedisURL(t))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := meshtest.Prefix(t)
	return env{st: store.New(rdb, prefix, testTTL), rdb: rdb, prefix: prefix}
}

type state struct {
	Phase string `json:"phase"`
	Count int    `json:"count"`
}

func TestConnectErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := store.Connect(ctx, "not a url"); err == nil {
		t.Fatal("Connect with a bad URL: want error")
	}
	// Port 1 on loopback refuses connections.
	rdb, err := store.Connect(ctx, "redis://127.0.0.1:1/0")
	if err == nil {
		_ = rdb.Close()
		t.Fatal("Connect to a closed port: want error")
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("error %q does not name the address", err)
	}
}

func TestNewDefaultTTL(t *testing.T) {
	e := newStore(t)
	st := store.New(e.rdb, e.prefix, 0)
	ctx := context.Background()
	if _, err := st.SaveState(ctx, "s1", 0, state{Phase: "x"}); err != nil {
		t.Fatal(err)
	}
	ttl, err := e.rdb.TTL(ctx, e.prefix+":{s1}:state").Result()
	if err != nil {
		t.Fatal(err)
	}
	// ttl 0 means the 7-day default.
	if ttl <= testTTL || ttl > 7*24*time.Hour {
		t.Errorf("TTL with default = %v, want about 7 days", ttl)
	}
	if st.Client() != redis.UniversalClient(e.rdb) {
		t.Error("Client() does not return the wrapped client")
	}
}

func TestLoadStateMissing(t *testing.T) {
	e := newStore(t)
	var s state
	ver, err := e.st.LoadState(context.Background(), "nosuch", &s)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LoadState on missing session: err = %v, want ErrNotFound", err)
	}
	if ver != 0 {
		t.Errorf("version = %d, want 0", ver)
	}
	if !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("error %q does not name the session", err)
	}
}

func TestSaveStateCreatesAndUpdates(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()

	v1, err := e.st.SaveState(ctx, "s1", 0, state{Phase: "start", Count: 1})
	if err != nil {
		t.Fatalf("SaveState(expect 0): %v", err)
	}
	if v1 != 1 {
		t.Fatalf("first version = %d, want 1", v1)
	}
	var got state
	ver, err := e.st.LoadState(ctx, "s1", &got)
	if err != nil {
		t.Fatal(err)
	}
	if ver != 1 || got != (state{Phase: "start", Count: 1}) {
		t.Fatalf("LoadState = %d %+v", ver, got)
	}

	v2, err := e.st.SaveState(ctx, "s1", v1, state{Phase: "next", Count: 2})
	if err != nil {
		t.Fatalf("SaveState(expect 1): %v", err)
	}
	if v2 != 2 {
		t.Fatalf("second version = %d, want 2", v2)
	}
	ver, err = e.st.LoadState(ctx, "s1", &got)
	if err != nil {
		t.Fatal(err)
	}
	if ver != 2 || got != (state{Phase: "next", Count: 2}) {
		t.Fatalf("LoadState after update = %d %+v", ver, got)
	}
}

func TestSaveStateConflict(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	if _, err := e.st.SaveState(ctx, "s1", 0, state{Phase: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SaveState(ctx, "s1", 1, state{Phase: "b"}); err != nil {
		t.Fatal(err)
	}

	for _, stale := range []int64{0, 1, 3, 42} {
		t.Run(fmt.Sprint("expect=", stale), func(t *testing.T) {
			nv, err := e.st.SaveState(ctx, "s1", stale, state{Phase: "stale"})
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("SaveState(expect %d) at version 2: err = %v, want ErrConflict", stale, err)
			}
			if nv != 0 {
				t.Errorf("version on conflict = %d, want 0", nv)
			}
			var got state
			ver, err := e.st.LoadState(ctx, "s1", &got)
			if err != nil {
				t.Fatal(err)
			}
			if ver != 2 || got.Phase != "b" {
				t.Errorf("after conflict: version %d state %+v, want 2 {b}", ver, got)
			}
		})
	}

	// A new session must be created with expect 0.
	if _, err := e.st.SaveState(ctx, "fresh", 5, state{}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SaveState(expect 5) on missing session: err = %v, want ErrConflict", err)
	}
	var s state
	if _, err := e.st.LoadState(ctx, "fresh", &s); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("conflicting create left state behind: %v", err)
	}
}

func TestSaveStateEncodeError(t *testing.T) {
	e := newStore(t)
	if _, err := e.st.SaveState(context.Background(), "s1", 0, make(chan int)); err == nil {
		t.Fatal("SaveState of an unencodable value: want error")
	}
}

func TestLoadStateDecodeError(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	if _, err := e.st.SaveState(ctx, "s1", 0, state{Phase: "a"}); err != nil {
		t.Fatal(err)
	}
	var wrong []int
	if _, err := e.st.LoadState(ctx, "s1", &wrong); err == nil {
		t.Fatal("LoadState into a mismatched type: want error")
	}
}

func TestSaveStateConcurrentCAS(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	base, err := e.st.SaveState(ctx, "s1", 0, state{Phase: "base"})
	if err != nil {
		t.Fatal(err)
	}

	const n = 16
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		mu        sync.Mutex
		winners   []int
		conflicts int
		others    []error
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			nv, err := e.st.SaveState(ctx, "s1", base, state{Phase: "writer", Count: i})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if nv != base+1 {
					others = append(others, fmt.Errorf("winner %d got version %d, want %d", i, nv, base+1))
				}
				winners = append(winners, i)
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				others = append(others, err)
			}
		}(i)
	}
	close(start)
	wg.Wait()

	for _, err := range others {
		t.Error(err)
	}
	if len(winners) != 1 || conflicts != n-1 {
		t.Fatalf("%d winners, %d conflicts; want 1 and %d", len(winners), conflicts, n-1)
	}
	var got state
	ver, err := e.st.LoadState(ctx, "s1", &got)
	if err != nil {
		t.Fatal(err)
	}
	if ver != base+1 || got.Phase != "writer" || got.Count != winners[0] {
		t.Errorf("stored %d %+v, want version %d written by %d", ver, got, base+1, winners[0])
	}
}

// sessionKeys lists the Redis keys under prefix.
func sessionKeys(t *testing.T, e env) []string {
	t.Helper()
	keys, err := meshtest.Keys(context.Background(), e.rdb, e.prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// touchAll writes every kind of key the store has for session.
func touchAll(t *testing.T, st *store.Store, session string) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.SaveState(ctx, session, 0, state{Phase: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendUnits(ctx, session, "T1", units.Unit{ID: "u1", Role: "user", Kind: units.KindMessage, Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutArtifact(ctx, session, "output"); err != nil {
		t.Fatal(err)
	}
	if err := st.JournalPut(ctx, session, 3, "llm", "answer"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendWindow(ctx, session, "T1", events.IterationRecord{Iteration: 1}, 5); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordUsage(ctx, session, "builder", 10, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SaveMemory(ctx, session, 0, memoryRecord{Text: "learned"}); err != nil {
		t.Fatal(err)
	}
}

func TestKeysCarrySessionHashTag(t *testing.T) {
	e := newStore(t)
	sessions := []string{"alpha", "beta-2"}
	for _, s := range sessions {
		touchAll(t, e.st, s)
	}
	keys := sessionKeys(t, e)
	// state, ctx, ctxids, ctxver, artifact, journal, stuck, usage, memory per session.
	if want := 9 * len(sessions); len(keys) != want {
		t.Fatalf("found %d keys, want %d: %v", len(keys), want, keys)
	}
	perSession := map[string]int{}
	for _, k := range keys {
		matched := false
		for _, s := range sessions {
			if strings.HasPrefix(k, e.prefix+":{"+s+"}:") {
				perSession[s]++
				matched = true
			}
		}
		if !matched {
			t.Errorf("key %q does not carry the hash tag %s:{<session>}:", k, e.prefix)
		}
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
			t.Errorf("key %q has more than one hash tag", k)
		}
	}
	for _, s := range sessions {
		if perSession[s] != 9 {
			t.Errorf("session %s has %d keys, want 9", s, perSession[s])
		}
	}
}

func TestTTLIsSet(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	touchAll(t, e.st, "s1")

	ttl, err := e.rdb.TTL(ctx, e.prefix+":{s1}:state").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > testTTL {
		t.Errorf("state key TTL = %v, want in (0, %v]", ttl, testTTL)
	}
	// Every key of the session expires, so an abandoned session goes away.
	for _, k := range sessionKeys(t, e) {
		ttl, err := e.rdb.TTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > testTTL {
			t.Errorf("key %s TTL = %v, want in (0, %v]", k, ttl, testTTL)
		}
	}
}

func unit(id, content string) units.Unit {
	return units.Unit{ID: id, Role: "user", Kind: units.KindMessage, Content: content, Turn: 1, Tokens: len(content)}
}

func ids(us []units.Unit) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.ID
	}
	return out
}

func TestAppendUnitsIdempotent(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()

	batch := []units.Unit{unit("u1", "one"), unit("u2", "two"), unit("u3", "three")}
	if err := e.st.AppendUnits(ctx, "s1", "T1", batch...); err != nil {
		t.Fatal(err)
	}
	// Redelivery appends the same ids again, possibly with other content.
	again := []units.Unit{unit("u1", "changed"), unit("u2", "two"), unit("u3", "three")}
	if err := e.st.AppendUnits(ctx, "s1", "T1", again...); err != nil {
		t.Fatal(err)
	}
	// A mixed batch: old ids skipped, new ones appended in order.
	if err := e.st.AppendUnits(ctx, "s1", "T1", unit("u2", "two"), unit("u4", "four"), unit("u5", "five")); err != nil {
		t.Fatal(err)
	}
	// Nothing to append is fine.
	if err := e.st.AppendUnits(ctx, "s1", "T1"); err != nil {
		t.Fatal(err)
	}

	got, err := e.st.Units(ctx, "s1", "T1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"u1", "u2", "u3", "u4", "u5"}; !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("units = %v, want %v", ids(got), want)
	}
	if got[0].Content != "one" {
		t.Errorf("re-appended unit replaced the first one: %q", got[0].Content)
	}
	if !reflect.DeepEqual(got[:3], batch) {
		t.Errorf("round trip: got %+v, want %+v", got[:3], batch)
	}
}

func TestAppendUnitsRejectsMissingID(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	err := e.st.AppendUnits(ctx, "s1", "T1", unit("u1", "one"), unit("", "anonymous"))
	if err == nil {
		t.Fatal("AppendUnits with a unit without id: want error")
	}
	if !strings.Contains(err.Error(), "without id") {
		t.Errorf("error %q does not say the id is missing", err)
	}
	// The batch is rejected as a whole.
	got, err := e.st.Units(ctx, "s1", "T1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("rejected batch stored %v", ids(got))
	}
}

func TestUnitsOrderAndScopes(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()

	empty, err := e.st.Units(ctx, "s1", "T1")
	if err != nil {
		t.Fatal(err)
	}
	if len(empty) != 0 {
		t.Fatalf("Units of an empty scope = %v", ids(empty))
	}

	var want []string
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("u%02d", 19-i) // ids not in sorted order
		want = append(want, id)
		if err := e.st.AppendUnits(ctx, "s1", "T1", unit(id, "c")); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.AppendUnits(ctx, "s1", "T2", unit("other", "c")); err != nil {
		t.Fatal(err)
	}
	got, err := e.st.Units(ctx, "s1", "T1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(got), want) {
		t.Errorf("Units order = %v, want %v", ids(got), want)
	}
	got2, err := e.st.Units(ctx, "s1", "T2")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(got2), []string{"other"}) {
		t.Errorf("scope T2 = %v", ids(got2))
	}
	// The same unit id in another scope is a different unit.
	if err := e.st.AppendUnits(ctx, "s1", "T2", unit("u00", "c")); err != nil {
		t.Fatal(err)
	}
	got2, _ = e.st.Units(ctx, "s1", "T2")
	if !reflect.DeepEqual(ids(got2), []string{"other", "u00"}) {
		t.Errorf("scope T2 after append = %v", ids(got2))
	}
}

func TestArtifacts(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()

	id1, err := e.st.PutArtifact(ctx, "s1", "full tool output\nline 2")
	if err != nil {
		t.Fatal(err)
	}
	id2, err := e.st.PutArtifact(ctx, "s1", "full tool output\nline 2")
	if err != nil {
		t.Fatal(err)
	}
	if id1 != id2 {
		t.Errorf("same content, different ids %q %q", id1, id2)
	}
	id3, err := e.st.PutArtifact(ctx, "s1", "other output")
	if err != nil {
		t.Fatal(err)
	}
	if id3 == id1 {
		t.Errorf("different content, same id %q", id1)
	}
	empty, err := e.st.PutArtifact(ctx, "s1", "")
	if err != nil {
		t.Fatal(err)
	}

	for id, want := range map[string]string{id1: "full tool output\nline 2", id3: "other output", empty: ""} {
		got, err := e.st.GetArtifact(ctx, "s1", id)
		if err != nil {
			t.Fatalf("GetArtifact(%s): %v", id, err)
		}
		if got != want {
			t.Errorf("GetArtifact(%s) = %q, want %q", id, got, want)
		}
	}

	if _, err := e.st.GetArtifact(ctx, "s1", "a-0000000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown artifact: err = %v, want ErrNotFound", err)
	}
	// Artifacts belong to their session.
	if _, err := e.st.GetArtifact(ctx, "s2", id1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("artifact of another session: err = %v, want ErrNotFound", err)
	}
}

type llmAnswer struct {
	Text  string            `json:"text"`
	Calls []string          `json:"calls"`
	Usage map[string]int    `json:"usage"`
	Meta  *struct{ N int }  `json:"meta,omitempty"`
	Extra map[string]string `json:"extra,omitempty"`
}

func TestJournal(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()

	var got llmAnswer
	found, err := e.st.JournalGet(ctx, "s1", 7, "llm", &got)
	if err != nil || found {
		t.Fatalf("JournalGet on missing step: found=%v err=%v, want false nil", found, err)
	}

	want := llmAnswer{Text: "done", Calls: []string{"bash", "write"}, Usage: map[string]int{"in": 5, "out": 2}, Meta: &struct{ N int }{3}}
	if err := e.st.JournalPut(ctx, "s1", 7, "llm", want); err != nil {
		t.Fatal(err)
	}
	found, err = e.st.JournalGet(ctx, "s1", 7, "llm", &got)
	if err != nil || !found {
		t.Fatalf("JournalGet after put: found=%v err=%v", found, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("journal round trip: got %+v, want %+v", got, want)
	}

	// Missing field of an existing step, and another step.
	var s string
	if found, err := e.st.JournalGet(ctx, "s1", 7, "tool:1", &s); err != nil || found {
		t.Errorf("missing field: found=%v err=%v", found, err)
	}
	if found, err := e.st.JournalGet(ctx, "s1", 8, "llm", &got); err != nil || found {
		t.Errorf("other step: found=%v err=%v", found, err)
	}

	// A second field does not disturb the first; putting again overwrites.
	if err := e.st.JournalPut(ctx, "s1", 7, "tool:1", "started"); err != nil {
		t.Fatal(err)
	}
	if err := e.st.JournalPut(ctx, "s1", 7, "tool:1", "finished"); err != nil {
		t.Fatal(err)
	}
	if found, err := e.st.JournalGet(ctx, "s1", 7, "tool:1", &s); err != nil || !found || s != "finished" {
		t.Errorf("tool:1 = %q found=%v err=%v", s, found, err)
	}
	var again llmAnswer
	if found, err := e.st.JournalGet(ctx, "s1", 7, "llm", &again); err != nil || !found || !reflect.DeepEqual(again, want) {
		t.Errorf("llm after other field: %+v found=%v err=%v", again, found, err)
	}

	// Decoding into the wrong type is an error, not "not found".
	var n int
	if _, err := e.st.JournalGet(ctx, "s1", 7, "llm", &n); err == nil {
		t.Error("JournalGet into a mismatched type: want error")
	}
	if err := e.st.JournalPut(ctx, "s1", 7, "bad", func() {}); err == nil {
		t.Error("JournalPut of an unencodable value: want error")
	}
}

func rec(it int, text string) events.IterationRecord {
	return events.IterationRecord{Iteration: it, TaskID: "T1", AssistantText: text}
}

func iterations(rs []events.IterationRecord) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Iteration
	}
	return out
}

func TestAppendWindow(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	const size = 3

	steps := []struct {
		add  events.IterationRecord
		want []int
	}{
		{rec(1, "a"), []int{1}},
		{rec(2, "b"), []int{1, 2}},
		{rec(3, "c"), []int{1, 2, 3}},
		{rec(4, "d"), []int{2, 3, 4}},
		{rec(5, "e"), []int{3, 4, 5}},
		// The same iteration again (redelivery) replaces, never duplicates.
		{rec(5, "e"), []int{3, 4, 5}},
		{rec(5, "e2"), []int{3, 4, 5}},
		{rec(6, "f"), []int{4, 5, 6}},
	}
	for i, s := range steps {
		got, err := e.st.AppendWindow(ctx, "s1", "T1", s.add, size)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !reflect.DeepEqual(iterations(got), s.want) {
			t.Fatalf("step %d: add %d: window %v, want %v", i, s.add.Iteration, iterations(got), s.want)
		}
	}
	got, err := e.st.AppendWindow(ctx, "s1", "T1", rec(7, "g"), size)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].AssistantText != "e2" {
		t.Errorf("re-added iteration 5 kept %q, want the newer record e2", got[0].AssistantText)
	}
	if !reflect.DeepEqual(got[len(got)-1], rec(7, "g")) {
		t.Errorf("record round trip: %+v", got[len(got)-1])
	}

	// Another task has its own window.
	other, err := e.st.AppendWindow(ctx, "s1", "T2", rec(1, "x"), size)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(iterations(other), []int{1}) {
		t.Errorf("window of T2 = %v", iterations(other))
	}
}

func TestAppendWindowOutOfOrder(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	var got []events.IterationRecord
	var err error
	for _, it := range []int{3, 1, 2} {
		if got, err = e.st.AppendWindow(ctx, "s1", "T1", rec(it, "r"), 5); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(iterations(got), []int{1, 2, 3}) {
		t.Errorf("window = %v, want oldest first [1 2 3]", iterations(got))
	}
}

func TestClearWindow(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	for it := 1; it <= 5; it++ {
		if _, err := e.st.AppendWindow(ctx, "s1", "T1", rec(it, "r"), 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.ClearWindow(ctx, "s1", "T1", 3); err != nil {
		t.Fatal(err)
	}
	got, err := e.st.AppendWindow(ctx, "s1", "T1", rec(6, "r"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(iterations(got), []int{4, 5, 6}) {
		t.Errorf("after ClearWindow(3): %v, want [4 5 6]", iterations(got))
	}

	// Clearing past the newest empties the window; clearing a missing
	// window is fine.
	if err := e.st.ClearWindow(ctx, "s1", "T1", 100); err != nil {
		t.Fatal(err)
	}
	if err := e.st.ClearWindow(ctx, "s1", "nosuch", 1); err != nil {
		t.Fatal(err)
	}
	got, err = e.st.AppendWindow(ctx, "s1", "T1", rec(7, "r"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(iterations(got), []int{7}) {
		t.Errorf("after ClearWindow(100): %v, want [7]", iterations(got))
	}
}

func TestUsage(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()

	empty, err := e.st.Usage(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(empty) != 0 {
		t.Fatalf("usage of a new session = %v", empty)
	}

	calls := []struct {
		role    string
		in, out int
	}{
		{"builder", 100, 20},
		{"builder", 50, 5},
		{"critic", 7, 3},
		{"builder", 0, 0},
	}
	for _, c := range calls {
		if err := e.st.RecordUsage(ctx, "s1", c.role, c.in, c.out); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.st.Usage(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"builder:input": 150, "builder:output": 25, "builder:calls": 3,
		"critic:input": 7, "critic:output": 3, "critic:calls": 1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Usage = %v, want %v", got, want)
	}
	other, err := e.st.Usage(ctx, "s2")
	if err != nil {
		t.Fatal(err)
	}
	if len(other) != 0 {
		t.Errorf("usage leaked to another session: %v", other)
	}
}

func TestConcurrentRecordUsage(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.st.RecordUsage(ctx, "s1", "builder", 3, 2)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.st.Usage(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"builder:input": 3 * n, "builder:output": 2 * n, "builder:calls": n}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Usage = %v, want %v", got, want)
	}
}

func TestReplaceUnitsCompareAndSet(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()

	_, v0, err := e.st.Context(ctx, "s1", "T1")
	if err != nil {
		t.Fatal(err)
	}
	if v0 != 0 {
		t.Fatalf("version of an empty context = %d, want 0", v0)
	}
	if err := e.st.AppendUnits(ctx, "s1", "T1", unit("u1", "one"), unit("u2", "two"), unit("u3", "three")); err != nil {
		t.Fatal(err)
	}
	got, v1, err := e.st.Context(ctx, "s1", "T1")
	if err != nil {
		t.Fatal(err)
	}
	if v1 != 1 || len(got) != 3 {
		t.Fatalf("after one append: version %d, %d units; want 1, 3", v1, len(got))
	}
	// A redelivered append adds nothing and leaves the version alone, so a
	// pruner that read the context is not sent round again for nothing.
	if err := e.st.AppendUnits(ctx, "s1", "T1", unit("u2", "two")); err != nil {
		t.Fatal(err)
	}
	if _, v, _ := e.st.Context(ctx, "s1", "T1"); v != v1 {
		t.Fatalf("a no-op append moved the version from %d to %d", v1, v)
	}

	v2, err := e.st.ReplaceUnits(ctx, "s1", "T1", v1, []units.Unit{unit("u1", "one"), unit("sum", "summary of two and three")})
	if err != nil {
		t.Fatal(err)
	}
	if v2 != v1+1 {
		t.Errorf("ReplaceUnits version = %d, want %d", v2, v1+1)
	}
	got, _, _ = e.st.Context(ctx, "s1", "T1")
	if want := []string{"u1", "sum"}; !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("after replace = %v, want %v", ids(got), want)
	}

	// A stale writer loses, and the context is left as it was.
	if _, err := e.st.ReplaceUnits(ctx, "s1", "T1", v1, []units.Unit{unit("x", "lost")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("replace at a stale version: err = %v, want ErrConflict", err)
	}
	got, _, _ = e.st.Context(ctx, "s1", "T1")
	if want := []string{"u1", "sum"}; !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("after a refused replace = %v, want %v", ids(got), want)
	}

	// A removed unit does not come back through a redelivered append; a new
	// one is appended and bumps the version.
	if err := e.st.AppendUnits(ctx, "s1", "T1", unit("u3", "three"), unit("u4", "four")); err != nil {
		t.Fatal(err)
	}
	got, v3, _ := e.st.Context(ctx, "s1", "T1")
	if want := []string{"u1", "sum", "u4"}; !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("after append = %v, want %v", ids(got), want)
	}
	if v3 != v2+1 {
		t.Errorf("append after replace: version %d, want %d", v3, v2+1)
	}
	if _, err := e.st.ReplaceUnits(ctx, "s1", "T1", v3, []units.Unit{unit("", "anonymous")}); err == nil {
		t.Error("replace with a unit without id: want error")
	}
}

func TestCompactionHistoryAndCache(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	type hist struct {
		Iteration int                  `json:"iteration"`
		Ratios    map[string][]float64 `json:"ratios"`
	}
	var h hist
	if found, err := e.st.LoadCompaction(ctx, "s1", "T1", &h); err != nil || found {
		t.Fatalf("before any compaction: found %v, err %v", found, err)
	}
	want := hist{Iteration: 4, Ratios: map[string][]float64{"compact_tool_output:run": {0.2, 0.31}}}
	if err := e.st.SaveCompaction(ctx, "s1", "T1", want); err != nil {
		t.Fatal(err)
	}
	if found, err := e.st.LoadCompaction(ctx, "s1", "T1", &h); err != nil || !found || !reflect.DeepEqual(h, want) {
		t.Fatalf("round trip: %+v, found %v, err %v", h, found, err)
	}
	if found, _ := e.st.LoadCompaction(ctx, "s1", "T2", &h); found {
		t.Fatal("another task's history is not this one's")
	}

	if _, found, err := e.st.CachedCompaction(ctx, "abc"); err != nil || found {
		t.Fatalf("empty cache: found %v, err %v", found, err)
	}
	if err := e.st.CacheCompaction(ctx, "abc", "the summary", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, found, err := e.st.CachedCompaction(ctx, "abc")
	if err != nil || !found || got != "the summary" {
		t.Fatalf("cache: %q, found %v, err %v", got, found, err)
	}
	ttl, err := e.st.Client().TTL(ctx, e.prefix+":cache:abc").Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("cache entry TTL %v, err %v", ttl, err)
	}
}
