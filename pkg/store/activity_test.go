package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/store"
)

func TestActivityIndex(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	for s, at := range map[string]time.Time{"old": t0, "mid": t0.Add(time.Minute), "new": t0.Add(time.Hour)} {
		if err := e.st.MarkActive(ctx, s, at); err != nil {
			t.Fatal(err)
		}
	}
	quiet, err := e.st.QuietSince(ctx, t0.Add(30*time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(quiet) != 2 || quiet[0].Session != "old" || !quiet[0].Last.Equal(t0) || quiet[1].Session != "mid" {
		t.Fatalf("QuietSince = %+v, want old then mid", quiet)
	}
	if q, _ := e.st.QuietSince(ctx, t0.Add(30*time.Minute), 1); len(q) != 1 || q[0].Session != "old" {
		t.Fatalf("QuietSince with limit 1 = %+v", q)
	}
	// A later sign of life counts; an earlier one does not move it back.
	if err := e.st.TouchActive(ctx, "old", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.st.MarkActive(ctx, "new", t0); err != nil {
		t.Fatal(err)
	}
	if last, found, err := e.st.LastActive(ctx, "old"); err != nil || !found || !last.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("LastActive(old) = %v, %v, %v after a touch", last, found, err)
	}
	if last, _, _ := e.st.LastActive(ctx, "new"); !last.Equal(t0.Add(time.Hour)) {
		t.Fatalf("LastActive(new) = %v: an earlier mark moved it back", last)
	}
	// An ended session leaves the index, and a stage still at work on one
	// of its events does not bring it back.
	if err := e.st.MarkEnded(ctx, "mid"); err != nil {
		t.Fatal(err)
	}
	if err := e.st.TouchActive(ctx, "mid", t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, found, err := e.st.LastActive(ctx, "mid"); err != nil || found {
		t.Fatalf("an ended session is in the index (found %v, %v)", found, err)
	}
}

// Redis being away is an outage (the handler waits it out), a bad request
// or a missing key is not.
func TestOutagesAreMarkedUnavailable(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	down := store.New(rdb, "down", time.Hour)
	var v struct{}
	_, err := down.LoadState(ctx, "s1", &v)
	if !bus.IsUnavailable(err) || !store.IsOutage(err) {
		t.Fatalf("LoadState with Redis down: %v; want it marked unavailable", err)
	}
	if err := down.MarkActive(ctx, "s1", time.Now()); !bus.IsUnavailable(err) {
		t.Fatalf("MarkActive with Redis down: %v; want it marked unavailable", err)
	}

	e := newStore(t)
	if _, err := e.st.LoadState(ctx, "nobody", &v); !errors.Is(err, store.ErrNotFound) || bus.IsUnavailable(err) {
		t.Fatalf("LoadState of a missing session: %v; want ErrNotFound, not an outage", err)
	}
	for name, err := range map[string]error{
		"wrong type":      e.rdb.LPush(ctx, e.prefix+":x", "a").Err(),
		"loading":         errors.New("LOADING Redis is loading the dataset in memory"),
		"read-only":       errors.New("READONLY You can't write against a read only replica."),
		"client closed":   redis.ErrClosed,
		"context ended":   context.Canceled,
		"script mistake":  e.rdb.Eval(ctx, "return redis.call('NOPE')", nil).Err(),
		"no such command": e.rdb.Do(ctx, "NOPE").Err(),
	} {
		want := name == "loading" || name == "read-only"
		if name == "wrong type" {
			err = e.rdb.Get(ctx, e.prefix+":x").Err()
		}
		if got := store.IsOutage(err); got != want {
			t.Errorf("%s (%v): IsOutage = %v, want %v", name, err, got, want)
		}
	}
}
