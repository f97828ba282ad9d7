package llm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// faulty runs the scripted server with script and returns it with a client
// that records its waits instead of waiting.
func faulty(t *testing.T, script string, ep Endpoint) (*scriptllm.Server, *Client, *sleeps) {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(script), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(s)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ep.BaseURL = url
	c := newClient(t, ep, nil)
	return srv, c, recordSleeps(c)
}

// A 200 whose body is not JSON (a proxy's HTML page) and one whose JSON is
// cut short are the same fault: both are retried, and both fail the same
// way, as retryable, when the retries run out.
func TestMalformedRepliesAreRetriedAlike(t *testing.T) {
	for name, raw := range map[string]string{
		"not JSON":       `{body: "<html><body>502 Bad Gateway</body></html>", content_type: text/html}`,
		"truncated JSON": `{body: '{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hal'}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv, c, _ := faulty(t, "rules:\n  - {name: bad, raw: "+raw+"}\n", Endpoint{MaxRetries: 2})
			_, err := Text(context.Background(), c, "s1", ask("hi"))
			if n := srv.Hits("bad"); n != 3 {
				t.Errorf("%d attempts, want 3 (the first and 2 retries)", n)
			}
			if !IsRetryable(err) || !errors.Is(err, ErrMalformedReply) || bus.IsPermanent(err) {
				t.Fatalf("error %v: want a retryable ErrMalformedReply, so the event is delivered again", err)
			}
			if !strings.Contains(err.Error(), "after 3 attempts") || !strings.Contains(err.Error(), "200 OK") {
				t.Errorf("error %q does not say what was received and how often", err)
			}

			srv, c, _ = faulty(t, "rules:\n  - {name: bad, times: 1, raw: "+raw+"}\n  - {name: good, reply: {content: fine}}\n", Endpoint{MaxRetries: 2})
			text, err := Text(context.Background(), c, "s1", ask("hi"))
			if err != nil || text != "fine" || srv.Hits("bad") != 1 || srv.Hits("good") != 1 {
				t.Errorf("Text = %q, %v (hits bad %d, good %d); want the retry's reply", text, err, srv.Hits("bad"), srv.Hits("good"))
			}
		})
	}
}

// A server that asks to come back later is waited for as long as it asks,
// past MaxBackoff and beyond MaxRetries, until the waits add up to
// MaxRetryWait; then the call fails with the reason, for good.
func TestRetryAfterHonouredUpToMaxRetryWait(t *testing.T) {
	srv, c, waits := faulty(t, "rules:\n  - {name: limited, error: {status: 429, message: slow down, retry_after: 60}}\n",
		Endpoint{MaxRetries: 1, MaxBackoff: 30 * time.Second, MaxRetryWait: 5 * time.Minute})
	_, err := Text(context.Background(), c, "s1", ask("hi"))
	if err == nil {
		t.Fatal("want an error")
	}
	if !strings.Contains(err.Error(), "rate limited (429 Too Many Requests) for 5m0s in total; giving up") {
		t.Errorf("error %q does not give the reason", err)
	}
	if IsRetryable(err) || !bus.IsPermanent(err) || !errors.Is(err, ErrRetryWaitExhausted) {
		t.Errorf("error %v: want it permanent, the allowed wait being spent", err)
	}
	got := waits.all()
	var total time.Duration
	for _, d := range got {
		if d != time.Minute {
			t.Errorf("waited %s, want the 60s the server asked for", d)
		}
		total += d
	}
	if total != 5*time.Minute || srv.Hits("limited") != 6 {
		t.Errorf("waited %v (%s) over %d attempts, want 5 waits of 1m over 6 attempts", got, total, srv.Hits("limited"))
	}
}

// A 503 with Retry-After is waited for like a 429, and a server that asks
// for more than the whole allowance at once is given up on at once.
func TestRetryAfterOf503(t *testing.T) {
	srv, c, waits := faulty(t, `
rules:
  - {name: loading, times: 2, error: {status: 503, message: loading, retry_after: 45}}
  - {name: ready, reply: {content: ok}}
`, Endpoint{MaxRetries: 1, MaxBackoff: 30 * time.Second, MaxRetryWait: 5 * time.Minute})
	if text, err := Text(context.Background(), c, "s1", ask("hi")); err != nil || text != "ok" {
		t.Fatalf("Text = %q, %v", text, err)
	}
	if got := waits.all(); len(got) != 2 || got[0] != 45*time.Second || got[1] != 45*time.Second || srv.Hits("ready") != 1 {
		t.Errorf("waited %v, want 45s twice, past MaxRetries and MaxBackoff", got)
	}

	_, c, waits = faulty(t, "rules:\n  - {error: {status: 503, retry_after: 600}}\n", Endpoint{MaxRetryWait: 5 * time.Minute})
	_, err := Text(context.Background(), c, "s1", ask("hi"))
	if !errors.Is(err, ErrRetryWaitExhausted) || !strings.Contains(err.Error(), "unavailable (503 Service Unavailable) for 0s in total; giving up") {
		t.Errorf("error %v, want the 10m wait refused at once", err)
	}
	if got := waits.all(); len(got) != 0 {
		t.Errorf("waited %v, want no wait", got)
	}
}

// MaxRetries below zero turns retries off, Retry-After or not.
func TestNoRetriesMeansNone(t *testing.T) {
	srv, c, waits := faulty(t, "rules:\n  - {name: limited, error: {status: 429, retry_after: 1}}\n", Endpoint{MaxRetries: -1})
	_, err := Text(context.Background(), c, "s1", ask("hi"))
	if !IsRetryable(err) || srv.Hits("limited") != 1 || len(waits.all()) != 0 {
		t.Errorf("error %v after %d attempts and waits %v; want the 429 at once, retryable", err, srv.Hits("limited"), waits.all())
	}
}
