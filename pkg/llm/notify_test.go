package llm

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every wait before a retry is told to the notifier with the session the
// call is for, as a follower reads it.
func TestNotifyRetries(t *testing.T) {
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, attempt int) {
		switch attempt {
		case 1:
			apiError(w, http.StatusTooManyRequests, "slow down")
		case 2:
			w.Header().Set("Retry-After", "2")
			apiError(w, http.StatusServiceUnavailable, "later")
		case 3:
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<html>proxy</html>")
		default:
			io.WriteString(w, completion("m", "ok", 1, 1))
		}
	})
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1", MaxRetries: 5, MaxRetryWait: time.Minute}, nil)
	var mu sync.Mutex
	var told []string
	c.NotifyRetries(func(_ context.Context, session string, r Retry) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, session+": "+r.String())
	})
	if _, err := c.Chat(context.Background(), "s-7", request()); err != nil {
		t.Fatal(err)
	}
	if len(told) != 3 {
		t.Fatalf("told %d retries, want 3: %q", len(told), told)
	}
	for i, want := range []string{
		"s-7: model answered 429; retry 1 of 5 in ",
		"s-7: model answered 503; waiting 2 s as it asked (2 s of at most 1m0s waited so far)",
		"s-7: model call failed (the reply was no completion); retry 2 of 5 in ",
	} {
		if !strings.HasPrefix(told[i], want) {
			t.Errorf("retry %d told %q, want %q", i+1, told[i], want)
		}
	}
}

func TestRetryString(t *testing.T) {
	for _, c := range []struct {
		r    Retry
		want string
	}{
		{Retry{Status: 429, Retry: 2, Max: 5, Wait: 8 * time.Second}, "model answered 429; retry 2 of 5 in 8 s"},
		{Retry{Status: 502, Retry: 1, Max: 3, Wait: 250 * time.Millisecond}, "model answered 502; retry 1 of 3 in 250 ms"},
		{Retry{Failure: "no reply: connection refused", Retry: 1, Max: 3, Wait: 1500 * time.Millisecond}, "model call failed (no reply: connection refused); retry 1 of 3 in 1.5 s"},
	} {
		if got := c.r.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}
