// Package servicetest holds what the services' own tests share: a store on
// the test Redis under a prefix of the test's own, and a bus that records
// what a service publishes.
package servicetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/store"
)

// Store is a store on the test Redis (meshtest.RedisURL) under a prefix of
// the test's own, closed when the test ends.
func Store(t testing.TB) *store.Store {
	t.Helper()
	rdb, err := store.Connect(context.Background(), meshtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return store.New(rdb, meshtest.Prefix(t), time.Hour)
}

// RecordingBus records what is published and consumes nothing.
type RecordingBus struct {
	mu        sync.Mutex
	published []events.Envelope
}

// Publish records env.
func (b *RecordingBus) Publish(_ context.Context, env events.Envelope) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.published = append(b.published, env)
	return nil
}

// Run consumes nothing.
func (b *RecordingBus) Run(context.Context, string, map[events.Type]bus.Handler, bus.RunOptions) error {
	return nil
}

// Published is what was published so far, in order.
func (b *RecordingBus) Published() []events.Envelope {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]events.Envelope(nil), b.published...)
}
