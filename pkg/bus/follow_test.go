package bus_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// A follower reads through one long-lived consumer, not one per event.
func TestFollowUsesOneConsumer(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	creates, err := b.nc.SubscribeSync("$JS.API.CONSUMER.CREATE." + events.StreamName(b.prefix) + ".>")
	if err != nil {
		t.Fatal(err)
	}
	var want []events.Envelope
	for step := 1; step <= 30; step++ {
		want = append(want, iteration("s1", step))
	}
	want = append(want, events.Must(events.SessionCompleted, "s1", "", 31, time.Now(), events.SessionCompletedData{Tasks: 1}))
	b.publish(t, want...)
	var got []events.Envelope
	if err := b.Follow(ctxT(t), "s1", func(env events.Envelope) (bool, error) {
		got = append(got, env)
		return env.Type.Terminal(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if !sameIDs(got, want) {
		t.Fatalf("Follow saw %v, want %v", ids(got), ids(want))
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, _ := creates.Pending()
	if n != 1 {
		t.Fatalf("following %d events created %d consumers, want 1", len(want), n)
	}
}

// restartableBus is a bus on a server of the test's own.
func restartableBus(t *testing.T, srv *meshtest.NATSServer) *bus.Bus {
	t.Helper()
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(nc, "restart", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Bootstrap(ctxT(t), bus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// publishUntilAccepted publishes env, trying again while the server is
// coming back.
func publishUntilAccepted(t *testing.T, b *bus.Bus, env events.Envelope) {
	t.Helper()
	waitFor(t, "the server to take "+env.ID, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return b.Publish(ctx, env) == nil
	})
}

// Followers (`ralph run`, `ralph resume`, the console) go on across a
// graceful restart of the server: nothing is missed, nothing is seen twice,
// and the follower does not end on the disconnection.
func TestFollowAndWatchGoOnAcrossARestart(t *testing.T) {
	srv := meshtest.StartNATS(t)
	b := restartableBus(t, srv)
	before := []events.Envelope{iteration("s1", 1), iteration("s1", 2)}
	for _, env := range before {
		publishUntilAccepted(t, b, env)
	}
	var (
		mu              sync.Mutex
		followed, saw   []events.Envelope
		followDone      = make(chan error, 1)
		watchCtx, stopW = context.WithCancel(context.Background())
		watchDone       = make(chan error, 1)
	)
	defer stopW()
	go func() {
		followDone <- b.Follow(ctxT(t), "s1", func(env events.Envelope) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			followed = append(followed, env)
			return env.Type.Terminal(), nil
		})
	}()
	go func() {
		watchDone <- b.Watch(watchCtx, func(env events.Envelope) {
			mu.Lock()
			defer mu.Unlock()
			saw = append(saw, env)
		})
	}()
	waitFor(t, "Follow to see the stored events", func() bool { mu.Lock(); defer mu.Unlock(); return len(followed) == 2 })
	// Watch gives no signal when it is ready: one event it must see first.
	probe := iteration("s0", 1)
	publishUntilAccepted(t, b, probe)
	waitFor(t, "Watch to see a new event", func() bool { mu.Lock(); defer mu.Unlock(); return len(saw) > 0 })

	srv.Restart(2 * time.Second)

	after := []events.Envelope{
		iteration("s1", 3),
		events.Must(events.SessionCompleted, "s1", "", 4, time.Now(), events.SessionCompletedData{Tasks: 1}),
	}
	for _, env := range after {
		publishUntilAccepted(t, b, env)
	}
	select {
	case err := <-followDone:
		if err != nil {
			t.Fatalf("Follow across a restart: %v", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("Follow did not see the events published after the restart")
	}
	waitFor(t, "Watch to see the events published after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(saw) == 3
	})
	stopW()
	if err := <-watchDone; err != nil {
		t.Fatalf("Watch across a restart: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := append(slices.Clone(before), after...); !sameIDs(followed, want) {
		t.Fatalf("Follow saw %v, want %v", ids(followed), ids(want))
	}
	if want := append([]events.Envelope{probe}, after...); !sameIDs(saw, want) {
		t.Fatalf("Watch saw %v, want %v", ids(saw), ids(want))
	}
}

func TestLastEvent(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	if _, found, err := b.LastEvent(ctxT(t), "s1", events.SessionFailed); err != nil || found {
		t.Fatalf("LastEvent of a session without one: found %v, %v", found, err)
	}
	first := events.Must(events.SessionFailed, "s1", "t1", 3, time.Now(), events.SessionFailedData{Reason: "one"})
	second := events.Must(events.SessionFailed, "s1", "t1", 7, time.Now(), events.SessionFailedData{Reason: "two"})
	b.publish(t, first, iteration("s1", 8), second, events.Must(events.SessionFailed, "s2", "t1", 9, time.Now(), events.SessionFailedData{Reason: "other"}))
	env, found, err := b.LastEvent(ctxT(t), "s1", events.SessionFailed)
	if err != nil || !found || env.ID != second.ID {
		t.Fatalf("LastEvent = %s, %v, %v; want %s", env.ID, found, err, second.ID)
	}
}
