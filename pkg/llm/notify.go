package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Retry is one wait of a model call before it is tried again, for whoever
// follows the session the call is for: a call that waits minutes on a rate
// limit is otherwise silent.
type Retry struct {
	// Status is the HTTP status that made the call wait, 0 when the call
	// failed without one (a dropped connection, a reply that was no
	// completion).
	Status int
	// Failure says what went wrong when there is no status.
	Failure string
	// Retry and Max count the attempts after failures without a
	// Retry-After (1-based); Told is set when the server said how long to
	// wait instead, and then Waited and MaxWait are what was waited so far
	// and may be in all.
	Retry, Max      int
	Told            bool
	Wait            time.Duration
	Waited, MaxWait time.Duration
}

// String is the retry as a follower reads it: "model answered 429; retry 2
// of 5 in 8 s".
func (r Retry) String() string {
	what := "model answered " + strconv.Itoa(r.Status)
	if r.Status == 0 {
		what = "model call failed (" + r.Failure + ")"
	}
	if r.Told {
		return fmt.Sprintf("%s; waiting %s as it asked (%s of at most %s waited so far)", what, seconds(r.Wait), seconds(r.Waited), r.MaxWait)
	}
	return fmt.Sprintf("%s; retry %d of %d in %s", what, r.Retry, r.Max, seconds(r.Wait))
}

// seconds shows a wait the way people say it: "8 s", "1.5 s", "250 ms".
func seconds(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + " s"
}

// RetryNotifier is told of every wait before a model call is tried again,
// with the session the call is for. It must return quickly.
type RetryNotifier func(ctx context.Context, session string, r Retry)

// NotifyRetries has fn told of every retry of the client's calls.
func (c *Client) NotifyRetries(fn RetryNotifier) { c.transport.notify = fn }

type sessionKey struct{}

// withSession marks ctx as a call for session, for the retry notices.
func withSession(ctx context.Context, session string) context.Context {
	return context.WithValue(ctx, sessionKey{}, session)
}

// retryOf describes the wait before the next attempt.
func retryOf(resp *http.Response, err error) Retry {
	var r Retry
	switch {
	case resp != nil:
		r.Status = resp.StatusCode
	case errors.Is(err, ErrMalformedReply):
		r.Failure = "the reply was no completion"
	case err != nil:
		r.Failure = "no reply: " + err.Error()
	}
	return r
}

// tell tells the notifier, if any, of a wait.
func (t *retryTransport) tell(ctx context.Context, r Retry) {
	if t.notify == nil {
		return
	}
	session, _ := ctx.Value(sessionKey{}).(string)
	t.notify(ctx, session, r)
}
