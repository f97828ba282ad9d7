package bus

import (
	"context"
	"fmt"

	"github.com/ralphmesh/ralph/pkg/events"
)

// GivingUp reports whether err ends the handling of the event for good:
// it is permanent, or it is retryable but this is the last delivery
// JetStream allows. An error while ctx is cancelled is neither: the
// replica is shutting down and the event goes to another one.
func GivingUp(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && (IsPermanent(err) || LastDelivery(ctx))
}

// GiveUp returns a middleware that runs fn when the handler fails for good
// (GivingUp), so that the service can say so in an event (a failed
// session) instead of leaving the event to a silent dead letter and its
// session waiting. When fn succeeds the event is acked. When fn fails, its
// error (naming the handler's) decides: a retryable one has the event
// delivered again, and given up on again; a permanent one, or any on the
// last delivery, dead-letters it.
func GiveUp(fn func(ctx context.Context, env events.Envelope, err error) error) Middleware {
	return func(h Handler) Handler {
		return func(ctx context.Context, env events.Envelope) error {
			err := h(ctx, env)
			if !GivingUp(ctx, err) {
				return err
			}
			if ferr := fn(ctx, env, err); ferr != nil {
				return fmt.Errorf("give up after %v: %w", err, ferr)
			}
			return nil
		}
	}
}
