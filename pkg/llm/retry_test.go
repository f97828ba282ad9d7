package llm

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{"none", nil, 0, false},
		{"seconds", map[string]string{"Retry-After": "2"}, 2 * time.Second, true},
		{"zero", map[string]string{"Retry-After": "0"}, 0, true},
		{"negative", map[string]string{"Retry-After": "-1"}, 0, false},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0, false},
		{"date", map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)}, 7 * time.Second, true},
		{"past date", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0, true},
		{"huge", map[string]string{"Retry-After": "99999999999999999"}, 24 * time.Hour, true},
		{"ms wins", map[string]string{"Retry-After-Ms": "1500", "Retry-After": "9"}, 1500 * time.Millisecond, true},
	}
	for _, tc := range cases {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: retryAfter = %s, %v; want %s, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	rt := &retryTransport{initial: 250 * time.Millisecond, maxBackoff: 30 * time.Second}
	for attempt := range 40 {
		full := min(rt.initial<<min(attempt, 30), rt.maxBackoff)
		if attempt >= 30 {
			full = rt.maxBackoff
		}
		for range 20 {
			d := rt.backoff(attempt)
			if d < full/2 || d > full {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", attempt, d, full/2, full)
			}
		}
	}
}
