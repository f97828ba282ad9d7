package bus

import (
	"context"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Heartbeat keeps the event being handled from going to another replica
// while a long handler (an LLM call, a shell command) runs: it tells
// JetStream the work is in progress every AckWait/3, so the ack deadline
// never passes, and stops before h's outcome is acked or nakked; on each
// beat it also tells RunOptions.Working that the event is being worked on.
// It needs the message the runner puts in the context; anywhere else it
// only runs h.
func Heartbeat(h Handler) Handler {
	return func(ctx context.Context, env events.Envelope) error {
		d, ok := ctx.Value(deliveryKey{}).(delivery)
		every := d.ackWait / 3
		if !ok || d.inProgress == nil || every <= 0 {
			return h(ctx, env)
		}
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					// A lost InProgress costs at most a redelivery, which
					// the journal makes harmless; nothing to do about it.
					_ = d.inProgress()
					if d.working != nil {
						// Bounded so a slow store never delays the next
						// InProgress.
						wctx, cancel := context.WithTimeout(ctx, every/2)
						d.working(wctx)
						cancel()
					}
				}
			}
		}()
		defer func() { close(stop); <-stopped }()
		return h(ctx, env)
	}
}
