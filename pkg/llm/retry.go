package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	// maxRetryWait bounds the waits servers ask for (Retry-After), added
	// up over one call.
	maxRetryWait time.Duration
	// timeout bounds each attempt: sending it and reading the reply.
	timeout time.Duration
	initial time.Duration
	log     *zap.Logger
	// sleep waits between attempts; tests replace it to wait for nothing.
	sleep func(ctx context.Context, d time.Duration) error
	// notify, when set, is told of every wait (Client.NotifyRetries).
	notify RetryNotifier
}

// maxReplyBytes bounds the reply read into memory; a chat completion is
// far smaller.
const maxReplyBytes = 64 << 20

// ErrMalformedReply is wrapped when a successful (2xx) reply is not a whole
// JSON object: an HTML page from a proxy, or a completion cut short. Either
// may be fine on the next attempt, so both are retried, and both fail the
// same way, as retryable, when the retries run out.
var ErrMalformedReply = errors.New("the reply is not a JSON object")

// ErrRetryWaitExhausted is wrapped when the server kept asking to wait
// (Retry-After) longer in total than the endpoint's MaxRetryWait. It is not
// retryable: the allowed wait was spent, so the call fails with the reason.
var ErrRetryWaitExhausted = errors.New("giving up")

// RoundTrip sends req until it succeeds, fails in a way no retry mends, or
// the retries run out: a failure without Retry-After gets maxRetries more
// attempts with exponential backoff; one whose server says when to come back
// (a 429 or 503 with Retry-After) is retried after that wait for as long as
// the waits add up to at most maxRetryWait. maxRetries 0 turns retrying
// off altogether. It returns the last response as
// is when attempts run out, so that go-openai can still decode the error
// body, and stops early when the request's context is done.
func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// The body is buffered because each attempt consumes it.
	body, err := readBody(req)
	if err != nil {
		return nil, fmt.Errorf("buffer request body: %w", err)
	}
	var waited time.Duration // what servers asked for, so far
	retries := 0             // attempts after failures without Retry-After
	for attempt := 0; ; attempt++ {
		resp, err := t.attempt(ctx, req, body)
		reason, retry := t.shouldRetry(resp, err)
		if !retry || t.maxRetries == 0 || ctx.Err() != nil {
			if err != nil && attempt > 0 {
				err = fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return resp, err
		}
		asked, told := time.Duration(0), false
		if resp != nil {
			asked, told = retryAfter(resp.Header, time.Now())
		}
		delay := t.backoff(attempt)
		if told {
			// What the server asked for, and never less than the backoff,
			// so a server asking for no wait at all is not hammered.
			delay = max(asked, delay)
			if waited+delay > t.maxRetryWait {
				return nil, fmt.Errorf("%s for %s in total; %w (it asks for %s more, past the %s allowed by RALPH_LLM_MAX_RETRY_WAIT)",
					limited(resp), waited, ErrRetryWaitExhausted, delay, t.maxRetryWait)
			}
		} else {
			if retries >= t.maxRetries {
				if err != nil && attempt > 0 {
					err = fmt.Errorf("after %d attempts: %w", attempt+1, err)
				}
				return resp, err
			}
			retries++
		}
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
			zap.String("reason", reason), zap.Duration("delay", delay), zap.Bool("retry_after", told),
			zap.Duration("waited", waited))
		if told {
			waited += delay
		}
		r := retryOf(resp, err)
		r.Retry, r.Max, r.Told, r.Wait, r.Waited, r.MaxWait = retries, t.maxRetries, told, delay, waited, t.maxRetryWait
		t.tell(ctx, r)
		if err := t.sleep(ctx, delay); err != nil {
			return nil, fmt.Errorf("waiting %s to retry after %s: %w", delay, reason, err)
		}
	}
}

// limited says what a reply asking to wait meant, for the error that gives
// up on it.
func limited(resp *http.Response) string {
	if resp.StatusCode == http.StatusTooManyRequests {
		return "rate limited (" + resp.Status + ")"
	}
	return "unavailable (" + resp.Status + ")"
}

// attempt sends one attempt under the per-attempt timeout and reads its
// reply whole, so that the timeout covers the reply too and a 2xx reply
// can be checked before go-openai decodes it: one that is not a whole JSON
// object is an ErrMalformedReply, whatever is wrong with it.
func (t *retryTransport) attempt(ctx context.Context, req *http.Request, body []byte) (*http.Response, error) {
	actx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	resp, err := t.next.RoundTrip(withBody(req.WithContext(actx), body))
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
		_ = resp.Body.Close()
		ok := resp.StatusCode >= 200 && resp.StatusCode < 300
		switch {
		case ok && err != nil && actx.Err() == nil:
			err = fmt.Errorf("%w: %s cut short after %d bytes: %w", ErrMalformedReply, resp.Status, len(data), err)
		case ok && err == nil && !jsonObject(data):
			err = fmt.Errorf("%w: %s %s, %d bytes: %q", ErrMalformedReply, resp.Status, resp.Header.Get("Content-Type"), len(data), head(data))
		}
	}
	if err != nil {
		if ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
			// Say so: the underlying error only says "context deadline
			// exceeded", which reads like the caller's doing.
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("timed out after %s: %w", t.timeout, err)
			} else {
				err = fmt.Errorf("timed out after %s: %w (%w)", t.timeout, context.DeadlineExceeded, err)
			}
		}
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	resp.ContentLength = int64(len(data))
	return resp, nil
}

// jsonObject reports whether data is one whole JSON object, the only
// thing a chat completion can be.
func jsonObject(data []byte) bool {
	data = bytes.TrimSpace(data)
	return len(data) > 0 && data[0] == '{' && json.Valid(data)
}

// head is the start of a reply, enough to recognise it in an error.
func head(data []byte) string {
	const n = 120
	if len(data) <= n {
		return string(data)
	}
	return string(data[:n]) + "..."
}

// shouldRetry reports whether an attempt's outcome is worth another attempt,
// and why, for the log. An attempt that timed out is not: the per-attempt
// timeout already waited long enough for this call, and the failure goes
// back to the caller (to be redelivered later).
func (t *retryTransport) shouldRetry(resp *http.Response, err error) (string, bool) {
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return err.Error(), false
		}
		return err.Error(), errors.Is(err, ErrMalformedReply) || retryableTransportErr(err)
	}
	if retryableStatus(resp.StatusCode) {
		return resp.Status, true
	}
	return "", false
}

// backoff returns how long to wait before the attempt after attempt
// (0-based) when the server does not say: exponential backoff from
// t.initial with jitter so that clients rate-limited together do not retry
// together, capped at t.maxBackoff.
func (t *retryTransport) backoff(attempt int) time.Duration {
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
