package bus

import (
	"context"
	"sync"

	"github.com/ralphmesh/ralph/pkg/events"
)

// OneAtATime returns a middleware that runs the handlings of one event (by
// its id) in this process one after the other. JetStream can deliver an
// event again while a handler here is still at work on it (a NATS restart
// does): the second delivery waits for the first to finish, then finds what
// it recorded (Once) and publishes that again, instead of finding a command
// that was started and never recorded and reporting it interrupted while it
// still runs. Different events run side by side as before. A delivery that
// waits is kept alive by the Heartbeat outside it, and gives up when its
// context ends.
func OneAtATime() Middleware {
	var mu sync.Mutex
	turns := map[string]*turn{}
	return func(h Handler) Handler {
		return func(ctx context.Context, env events.Envelope) error {
			mu.Lock()
			t := turns[env.ID]
			if t == nil {
				t = &turn{token: make(chan struct{}, 1)}
				turns[env.ID] = t
			}
			t.users++
			mu.Unlock()
			defer func() {
				mu.Lock()
				if t.users--; t.users == 0 {
					delete(turns, env.ID)
				}
				mu.Unlock()
			}()
			select {
			case t.token <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			defer func() { <-t.token }()
			return h(ctx, env)
		}
	}
}

// turn is one event's place: token is held by the handling at work, users
// count the handlings at work or waiting.
type turn struct {
	token chan struct{}
	users int
}
