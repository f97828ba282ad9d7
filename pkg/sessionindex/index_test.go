package sessionindex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
)

// open bootstraps the index on a fresh prefix and opens it twice, as two
// builder replicas would.
func open(t *testing.T) (*sessionindex.Index, *sessionindex.Index) {
	t.Helper()
	prefix := meshtest.Prefix(t)
	ctx := context.Background()
	var out []*sessionindex.Index
	for range 2 {
		nc, err := nats.Connect(meshtest.NATSURL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := sessionindex.Bootstrap(ctx, js, prefix, sessionindex.Config{TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		x, err := sessionindex.Open(ctx, js, prefix)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out[0], out[1]
}

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func entry(team, id string, ver int64, state string, at time.Time) sessionindex.Entry {
	return sessionindex.Entry{
		Summary: sessionindex.Summary{ID: id, Team: team, State: state, Iterations: int(ver), StartedAt: at, UpdatedAt: at},
		Tasks:   []sessionindex.Task{{ID: "T1", Title: "one", Status: "active", Subtasks: []string{}}},
		Version: ver,
	}
}

func TestPutAndGet(t *testing.T) {
	ctx := context.Background()
	x, other := open(t)
	if _, err := x.Get(ctx, "web", "s1"); !errors.Is(err, sessionindex.ErrNotFound) {
		t.Fatalf("Get of nothing: %v, want ErrNotFound", err)
	}
	if err := x.Put(ctx, entry("web", "s1", 1, sessionindex.StateRunning, t0)); err != nil {
		t.Fatal(err)
	}
	// The later version wins, keeping the first start.
	if err := x.Put(ctx, entry("web", "s1", 3, sessionindex.StateRunning, t0.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	got, err := other.Get(ctx, "web", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 3 || got.Iterations != 3 || !got.StartedAt.Equal(t0) || !got.UpdatedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("after versions 1 and 3: %+v", got.Summary)
	}
	// An older version, written by another replica that learnt of it
	// late, does not replace it.
	if err := other.Put(ctx, entry("web", "s1", 2, sessionindex.StateFailed, t0.Add(2*time.Minute))); err != nil {
		t.Fatal(err)
	}
	if got, _ := x.Get(ctx, "web", "s1"); got.Version != 3 || got.State != sessionindex.StateRunning {
		t.Errorf("an older version replaced the entry: %+v", got.Summary)
	}
	// The same session id in another team is another entry.
	if _, err := x.Get(ctx, "ops", "s1"); !errors.Is(err, sessionindex.ErrNotFound) {
		t.Errorf("team ops sees web's session: %v", err)
	}
	if err := x.Put(ctx, entry("a.b", "s1", 1, "", t0)); err == nil {
		t.Error("an invalid team was indexed")
	}
}

// Replicas writing the same session at once leave the latest version.
func TestConcurrentPuts(t *testing.T) {
	ctx := context.Background()
	x, other := open(t)
	var wg sync.WaitGroup
	for v := int64(1); v <= 20; v++ {
		w := x
		if v%2 == 0 {
			w = other
		}
		wg.Go(func() {
			if err := w.Put(ctx, entry("web", "busy", v, sessionindex.StateRunning, t0.Add(time.Duration(v)*time.Second))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got, _ := x.Get(ctx, "web", "busy"); got.Version != 20 || !got.StartedAt.Before(t0.Add(21*time.Second)) {
		t.Errorf("after 20 concurrent versions: version %d", got.Version)
	}
}

func TestListAndRunning(t *testing.T) {
	ctx := context.Background()
	x, _ := open(t)
	if all, err := x.List(ctx, ""); err != nil || len(all) != 0 {
		t.Fatalf("an empty index lists %v %v", all, err)
	}
	for i, e := range []sessionindex.Entry{
		entry("web", "old", 1, sessionindex.StateCompleted, t0),
		entry("web", "new", 1, sessionindex.StateRunning, t0.Add(time.Hour)),
		entry("web", "mid", 1, sessionindex.StateRunning, t0.Add(time.Minute)),
		entry("ops", "theirs", 1, sessionindex.StateRunning, t0.Add(30*time.Minute)),
	} {
		if err := x.Put(ctx, e); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
	if err := x.SetTeamTokens(ctx, "web", "20260304", 99); err != nil {
		t.Fatal(err)
	}
	web, err := x.List(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if ids := idsOf(web); ids != "[new mid old]" {
		t.Errorf("team web lists %s, want its own, newest first (and no day's tokens)", ids)
	}
	all, _ := x.List(ctx, "")
	if ids := idsOf(all); ids != "[new theirs mid old]" {
		t.Errorf("every team lists %s", ids)
	}
	if n, err := x.Running(ctx, "web"); err != nil || n != 2 {
		t.Errorf("web runs %d (%v), want 2", n, err)
	}
	if err := x.End(ctx, "web", "mid", sessionindex.StateFailed, "session state is gone", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, _ := x.Get(ctx, "web", "mid")
	if got.State != sessionindex.StateFailed || got.Reason != "session state is gone" || len(got.Tasks) != 1 || got.Version != 2 {
		t.Errorf("after End: %+v", got)
	}
	// The state's write of the version End replaced does not bring it back.
	if err := x.Put(ctx, entry("web", "mid", 1, sessionindex.StateRunning, t0.Add(3*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if got, _ := x.Get(ctx, "web", "mid"); got.State != sessionindex.StateFailed {
		t.Errorf("the ended session runs again: %+v", got.Summary)
	}
	if n, _ := x.Running(ctx, "web"); n != 1 {
		t.Errorf("web runs %d after one ended, want 1", n)
	}
	if err := x.End(ctx, "web", "never-indexed", sessionindex.StateFailed, "lost", t0); err != nil {
		t.Fatal(err)
	}
	if got, err := x.Get(ctx, "web", "never-indexed"); err != nil || got.State != sessionindex.StateFailed {
		t.Errorf("End of a session the index did not have: %+v %v", got, err)
	}
}

func TestTeamTokens(t *testing.T) {
	ctx := context.Background()
	x, other := open(t)
	if n, err := x.TeamTokens(ctx, "web", "20260304"); err != nil || n != 0 {
		t.Fatalf("no tokens yet: %d %v", n, err)
	}
	for _, total := range []int64{10, 50, 30} {
		if err := other.SetTeamTokens(ctx, "web", "20260304", total); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := x.TeamTokens(ctx, "web", "20260304"); n != 50 {
		t.Errorf("after 10, 50, 30: %d, want the largest", n)
	}
	if n, _ := x.TeamTokens(ctx, "ops", "20260304"); n != 0 {
		t.Errorf("team ops: %d", n)
	}
}

func idsOf(es []sessionindex.Entry) string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return fmt.Sprint(ids)
}
