package store

import (
	"testing"
	"time"
)

// The Lua scripts take the TTL in whole seconds. EXPIRE with 0 deletes the
// key, so a sub-second TTL must round up rather than down to 0.
func TestTTLSecondsRoundsUp(t *testing.T) {
	cases := []struct {
		ttl  time.Duration
		want string
	}{
		{time.Millisecond, "1"},
		{500 * time.Millisecond, "1"},
		{time.Second, "1"},
		{1500 * time.Millisecond, "2"},
		{time.Hour, "3600"},
		{0, "604800"}, // default: 7 days
	}
	for _, c := range cases {
		if got := New(nil, "p", c.ttl).ttlSeconds(); got != c.want {
			t.Errorf("ttl %v: ttlSeconds() = %s, want %s", c.ttl, got, c.want)
		}
	}
}

func TestKeyFormat(t *testing.T) {
	s := New(nil, "pre", time.Hour)
	if got, want := s.key("sess", "ctx", "T1"), "pre:{sess}:ctx:T1"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	if got, want := s.key("sess", "state"), "pre:{sess}:state"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
}
