package llm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// retryTransport resends requests that failed in a way a retry may fix. It
// sits below go-openai, as its HTTP transport, because only there are the
// status code and Retry-After header of a failed attempt visible.
//
// Chat completions have no side effects beyond cost, so resending a POST
// whose fate is unknown (connection dropped mid-response) is safe.
type retryTransport struct {
	next       http.RoundTripper
	maxRetries int
	maxBackoff time.Duration
	initial    time.Duration
	log        *zap.Logger
}

// RoundTrip sends req up to 1+maxRetries times. It returns the last response
// as is when attempts run out, so that go-openai can still decode the error
// body, and stops early when the request's context is done.
func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// The body is buffered because each attempt consumes it.
	body, err := readBody(req)
	if err != nil {
		return nil, fmt.Errorf("buffer request body: %w", err)
	}
	for attempt := 0; ; attempt++ {
		resp, err := t.next.RoundTrip(withBody(req, body))
		reason, retry := t.shouldRetry(resp, err)
		if !retry || attempt >= t.maxRetries || ctx.Err() != nil {
			if err != nil && attempt > 0 {
				err = fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return resp, err
		}

		delay := t.backoff(attempt, resp)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
			// The call would time out while waiting; give the failure back
			// now so the caller can requeue it instead of idling.
			if err != nil {
				err = fmt.Errorf("after %d attempts, next wait %s exceeds deadline: %w", attempt+1, delay, err)
			}
			return resp, err
		}

		t.log.Warn("llm: retrying request",
			zap.Int("attempt", attempt+1), zap.Int("max_retries", t.maxRetries),
			zap.String("reason", reason), zap.Duration("delay", delay))
		if resp != nil {
			drainClose(resp.Body)
		}
		if err := sleep(ctx, delay); err != nil {
			return nil, fmt.Errorf("waiting %s to retry after %s: %w", delay, reason, err)
		}
	}
}

// shouldRetry reports whether an attempt's outcome is worth another attempt,
// and why, for the log.
func (t *retryTransport) shouldRetry(resp *http.Response, err error) (string, bool) {
	if err != nil {
		return err.Error(), retryableTransportErr(err)
	}
	if retryableStatus(resp.StatusCode) {
		return resp.Status, true
	}
	return "", false
}

// backoff returns how long to wait before the attempt after attempt (0-based):
// what the server asked for, if anything, else exponential backoff from
// t.initial with jitter so that clients rate-limited together do not retry
// together. Either way it is capped at t.maxBackoff.
func (t *retryTransport) backoff(attempt int, resp *http.Response) time.Duration {
	if resp != nil {
		if d, ok := retryAfter(resp.Header, time.Now()); ok {
			return min(d, t.maxBackoff)
		}
	}
	d := t.maxBackoff
	if attempt < 30 { // beyond this the shift overflows, and the cap applies anyway
		d = min(t.initial<<attempt, t.maxBackoff)
	}
	if half := d / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	return d
}

// retryAfter parses the wait a server asked for: OpenAI's retry-after-ms
// when present, else Retry-After as seconds or an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < float64(24*time.Hour/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Clamp before converting so that absurd values cannot overflow.
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// readBody reads and closes req's body; nil means there is none.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

// withBody returns a copy of req carrying a fresh reader over body, leaving
// req untouched as the RoundTripper contract requires.
func withBody(req *http.Request, body []byte) *http.Request {
	r := req.Clone(req.Context())
	if body == nil {
		return r
	}
	if len(body) == 0 {
		r.Body, r.GetBody, r.ContentLength = http.NoBody, nil, 0
		return r
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	return r
}

// drainClose discards a little of body before closing it, so that the
// connection can be reused for the next attempt.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

// sleep waits for d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
