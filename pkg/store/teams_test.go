package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ralphmesh/ralph/internal/meshtest"
)

// A team's tokens of a day count each step once, however often it is
// recorded (a redelivered step), and steps recorded at once all count.
func TestTeamTokens(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	if n, err := e.st.TeamTokens(ctx, "web", "20260304"); err != nil || n != 0 {
		t.Fatalf("a day without tokens: %d %v", n, err)
	}
	for range 3 {
		if n, err := e.st.AddTeamTokens(ctx, "web", "20260304", "s1", 1, 40); err != nil || n != 40 {
			t.Fatalf("step 1 of s1: total %d, %v; want 40 however often it is recorded", n, err)
		}
	}
	var wg sync.WaitGroup
	for step := 2; step <= 11; step++ {
		wg.Go(func() {
			if _, err := e.st.AddTeamTokens(ctx, "web", "20260304", "s2", step, 10); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n, _ := e.st.TeamTokens(ctx, "web", "20260304"); n != 140 {
		t.Errorf("total %d, want 140", n)
	}
	// Another team and another day are apart.
	if n, _ := e.st.AddTeamTokens(ctx, "ops", "20260304", "s1", 1, 7); n != 7 {
		t.Errorf("team ops: %d, want 7", n)
	}
	if n, _ := e.st.TeamTokens(ctx, "web", "20260305"); n != 0 {
		t.Errorf("the next day: %d, want 0", n)
	}
	keys, err := meshtest.Keys(ctx, e.rdb, e.prefix+":team:{web}:20260304:*")
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v %v", keys, err)
	}
	for _, k := range keys {
		if ttl := e.rdb.TTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has no expiry", k)
		}
	}
}
