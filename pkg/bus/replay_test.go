package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

func ids(envs []events.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

func sameIDs(got, want []events.Envelope) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].ID != want[i].ID {
			return false
		}
	}
	return true
}

func TestReplayReturnsSessionInOrder(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	var want []events.Envelope
	for step := 1; step <= 5; step++ {
		env := iteration("s1", step)
		want = append(want, env)
		b.publish(t, env, iteration("s2", step)) // another session interleaved
	}
	terminal := events.Must(events.SessionCompleted, "s1", "", 6, time.Now(), events.SessionCompletedData{Tasks: 1})
	b.publish(t, terminal)
	want = append(want, terminal)

	var got []events.Envelope
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	if err := b.Replay(ctx, "s1", func(env events.Envelope) error {
		got = append(got, env)
		return nil
	}); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if !sameIDs(got, want) {
		t.Fatalf("Replay gave %v, want %v", ids(got), ids(want))
	}
	if got[len(got)-1].Type != events.SessionCompleted {
		t.Errorf("last event type = %s, want %s", got[len(got)-1].Type, events.SessionCompleted)
	}

	// Replaying again gives the same events: the stream keeps them.
	got = nil
	if err := b.Replay(ctx, "s1", func(env events.Envelope) error { got = append(got, env); return nil }); err != nil {
		t.Fatalf("second Replay: %v", err)
	}
	if !sameIDs(got, want) {
		t.Fatalf("second Replay gave %v, want %v", ids(got), ids(want))
	}
}

func TestReplaySingleEvent(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	env := iteration("only", 1)
	b.publish(t, env)
	var got []events.Envelope
	if err := b.Replay(ctxT(t), "only", func(e events.Envelope) error { got = append(got, e); return nil }); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if !sameIDs(got, []events.Envelope{env}) {
		t.Fatalf("Replay gave %v, want [%s]", ids(got), env.ID)
	}
}

func TestReplayUnknownSession(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	b.publish(t, iteration("s1", 1))
	called := false
	err := b.Replay(ctxT(t), "nope", func(events.Envelope) error { called = true; return nil })
	if !errors.Is(err, bus.ErrNoSession) {
		t.Fatalf("Replay of an unknown session: %v, want ErrNoSession", err)
	}
	if called {
		t.Error("fn was called for an unknown session")
	}
	// A session whose id is a prefix of an existing one is still unknown.
	if err := b.Replay(ctxT(t), "s", func(events.Envelope) error { return nil }); !errors.Is(err, bus.ErrNoSession) {
		t.Fatalf("Replay of session \"s\": %v, want ErrNoSession", err)
	}
}

func TestReplayInvalidSession(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	for _, id := range []string{"", "a.b", "a b", "*", ">"} {
		err := b.Replay(ctxT(t), id, func(events.Envelope) error { return nil })
		if !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Replay(%q): %v, want events.ErrInvalid", id, err)
		}
		err = b.Follow(ctxT(t), id, func(events.Envelope) (bool, error) { return true, nil })
		if !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Follow(%q): %v, want events.ErrInvalid", id, err)
		}
	}
}

func TestReplayStopsOnCallbackError(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	b.publish(t, iteration("s1", 1), iteration("s1", 2), iteration("s1", 3))
	stop := errors.New("enough")
	n := 0
	err := b.Replay(ctxT(t), "s1", func(events.Envelope) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Replay returned %v, want the callback's error", err)
	}
	if n != 2 {
		t.Fatalf("fn called %d times, want 2 (stop at the failure)", n)
	}
}

func TestReplaySkipsUndecodableEvents(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	first := iteration("s1", 1)
	b.publish(t, first)
	if _, err := b.JetStream().Publish(ctxT(t), events.Subject(b.prefix, events.DefaultTeam, "s1", events.IterationCompleted), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	var got []events.Envelope
	if err := b.Replay(ctxT(t), "s1", func(e events.Envelope) error { got = append(got, e); return nil }); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if !sameIDs(got, []events.Envelope{first}) {
		t.Fatalf("Replay gave %v, want [%s]", ids(got), first.ID)
	}
}

func TestFollowSeesLiveEventsAndStops(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	before := []events.Envelope{iteration("s1", 1), iteration("s1", 2)}
	b.publish(t, before...)
	b.publish(t, iteration("s2", 1))

	var (
		mu  sync.Mutex
		got []events.Envelope
	)
	seen := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	done := make(chan error, 1)
	go func() {
		done <- b.Follow(ctxT(t), "s1", func(env events.Envelope) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, env)
			return env.Type.Terminal(), nil
		})
	}()
	waitFor(t, "Follow to see the stored events", func() bool { return seen() == 2 })

	after := []events.Envelope{
		iteration("s1", 3),
		events.Must(events.SessionFailed, "s1", "", 4, time.Now(), events.SessionFailedData{Reason: "stuck"}),
	}
	b.publish(t, iteration("s2", 2)) // another session's event is not followed
	b.publish(t, after...)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Follow: %v", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("Follow did not stop at the terminal event")
	}

	// Published after Follow returned: not seen.
	b.publish(t, iteration("s1", 5))
	mu.Lock()
	defer mu.Unlock()
	want := append(append([]events.Envelope{}, before...), after...)
	if !sameIDs(got, want) {
		t.Fatalf("Follow saw %v, want %v", ids(got), ids(want))
	}
}

func TestFollowWaitsForASessionThatHasNotStarted(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	done := make(chan error, 1)
	var got guarded[events.Envelope]
	go func() {
		done <- b.Follow(ctxT(t), "later", func(env events.Envelope) (bool, error) {
			got.set(env)
			return true, nil
		})
	}()
	time.Sleep(200 * time.Millisecond)
	env := iteration("later", 1)
	b.publish(t, env)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Follow: %v", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("Follow did not see an event published after it started")
	}
	if g := got.get(); g.ID != env.ID {
		t.Fatalf("Follow saw %q, want %q", g.ID, env.ID)
	}
}

func TestFollowReturnsCallbackErrorAndContextEnd(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	b.publish(t, iteration("s1", 1))
	boom := errors.New("boom")
	if err := b.Follow(ctxT(t), "s1", func(events.Envelope) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("Follow returned %v, want the callback's error", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- b.Follow(ctx, "s1", func(events.Envelope) (bool, error) {
			cancel() // seen the stored event; nothing more will come
			return false, nil
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Follow after cancel returned %v, want context.Canceled", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("Follow did not return after its context ended")
	}
}

func TestWatchSeesOnlyNewEvents(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	old := iteration("s1", 1)
	b.publish(t, old)

	var (
		mu  sync.Mutex
		got []events.Envelope
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, func(env events.Envelope) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, env)
		})
	}()
	// Watch gives no signal when it is ready: publish new events (of
	// several sessions) until one shows up.
	step := 2
	waitFor(t, "Watch to see a new event", func() bool {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			return true
		}
		b.publish(t, iteration("s1", step), iteration("s2", step))
		step++
		time.Sleep(100 * time.Millisecond)
		return false
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch returned %v after cancel, want nil", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("Watch did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range got {
		if e.ID == old.ID {
			t.Fatalf("Watch delivered %s, published before it started", old.ID)
		}
	}
}

// guarded is a mutex-guarded value.
type guarded[T any] struct {
	mu sync.Mutex
	v  T
}

func (a *guarded[T]) set(v T) { a.mu.Lock(); a.v = v; a.mu.Unlock() }
func (a *guarded[T]) get() T  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }
