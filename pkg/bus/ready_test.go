package bus_test

import (
	"context"
	"testing"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// Ready is called once, after every consumer of the service exists: a
// service that logs "running" from it is really consuming.
func TestRunCallsReadyOnceConsumersExist(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	handlers := map[events.Type]bus.Handler{
		events.CritiqueRequested: func(context.Context, events.Envelope) error { return nil },
		events.PruneRequested:    func(context.Context, events.Envelope) error { return nil },
	}
	ready := make(chan []string, 2)
	done := make(chan error, 1)
	go func() {
		done <- b.Run(ctx, svc, handlers, bus.RunOptions{Ready: func() {
			var found []string
			if info, err := b.JetStream().Consumer(ctx, events.StreamName(b.Prefix()), bus.ConsumerName(svc)); err == nil {
				found = info.CachedInfo().Config.FilterSubjects
			}
			ready <- found
		}})
	}()
	select {
	case found := <-ready:
		if len(found) != len(handlers) {
			t.Fatalf("Ready called with the consumer filtered to %v, want all %d types", found, len(handlers))
		}
	case err := <-done:
		t.Fatalf("Run returned before Ready: %v", err)
	case <-ctx.Done():
		t.Fatal("Ready never called")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(ready) != 0 {
		t.Fatal("Ready called more than once")
	}
}

// A service whose consumers cannot be made is never ready.
func TestRunFailingIsNeverReady(t *testing.T) {
	t.Parallel()
	b := connectBus(t, meshtest.Prefix(t)) // not bootstrapped
	called := false
	err := b.Run(ctxT(t), svc, only(func(context.Context, events.Envelope) error { return nil }), bus.RunOptions{Ready: func() { called = true }})
	if err == nil || called {
		t.Fatalf("Run without a stream: err %v, ready %v", err, called)
	}
}
