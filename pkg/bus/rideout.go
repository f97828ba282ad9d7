package bus

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/events"
)

// RideOut returns a middleware that waits out an outage instead of
// spending the event's deliveries on it. When h fails with an error marked
// Unavailable (Redis or NATS unreachable, loading, read-only: the data is
// safe, only the server is away), h is run again after a growing pause
// (base, doubling up to max) for as long as budget allows; the event is
// not nakked meanwhile, so the Heartbeat outside it keeps it from being
// redelivered, and a replica whose handlers all wait takes no new events:
// the consumer is paused. Past the budget the failure becomes permanent
// with the reason, so the event is given up on (and its session ended)
// rather than retried forever. A zero budget turns riding out off.
//
// The runs of an event in this process share what Once computed but could
// not record, so a command that finished while Redis was away is recorded
// once it is back, not reported as interrupted: the runs of one handling,
// and a redelivery of the same event to this replica while an earlier
// handling still waits (a NATS restart during the outage can redeliver it).
func RideOut(budget, base, max time.Duration, log *zap.Logger) Middleware {
	if log == nil {
		log = zap.NewNop()
	}
	if base <= 0 {
		base = time.Second
	}
	if max < base {
		max = base
	}
	return func(h Handler) Handler {
		if budget <= 0 {
			return h
		}
		shared := newHeld()
		return func(ctx context.Context, env events.Envelope) error {
			began := time.Now()
			wait := base
			// What a run computed but could not record is recorded by the
			// next run (Once), not computed again.
			ctx = withHeld(ctx, shared)
			for attempt := 1; ; attempt++ {
				err := h(ctx, env)
				if !IsUnavailable(err) || ctx.Err() != nil {
					return err
				}
				out := time.Since(began)
				if out >= budget {
					return Permanent(fmt.Errorf("a server was unavailable for %s, longer than the outage budget of %s (RALPH_STREAM_OUTAGE_BUDGET): %w",
						out.Round(time.Millisecond), budget, err))
				}
				pause := min(wait, budget-out)
				log.Warn("server unavailable; waiting before trying the event again", zap.String("session", env.Session),
					zap.String("event", env.ID), zap.Int("attempt", attempt), zap.Duration("pause", pause),
					zap.Duration("unavailable_for", out), zap.Duration("budget", budget), zap.Error(err))
				t := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					t.Stop()
					return err
				case <-t.C:
				}
				wait = min(wait*2, max)
			}
		}
	}
}
