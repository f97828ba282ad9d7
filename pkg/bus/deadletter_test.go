package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// RunDeadLetters hands a supervisor every dead letter with the event, its
// session and step, and who gave up on it and why; one that cannot be
// decoded still names its session and type from its subject.
func TestRunDeadLettersHandsOverEveryDeadLetter(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	got := make(chan bus.DeadLetter, 4)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- b.RunDeadLetters(ctx, "supervisor", func(_ context.Context, dl bus.DeadLetter) error {
			got <- dl
			return nil
		}, bus.RunOptions{AckWait: time.Second, Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case <-time.After(waitDeadline):
		t.Fatal("RunDeadLetters never became ready")
	}
	startRun(t, b, svc, only(func(context.Context, events.Envelope) error {
		panic("nil map")
	}), bus.RunOptions{AckWait: time.Second})

	env := iteration("s1", 4)
	b.publish(t, env)
	dl := receive(t, got)
	if dl.Invalid != nil || dl.Event.ID != env.ID || dl.Session != "s1" || dl.Type != events.IterationCompleted || dl.Event.Step != 4 {
		t.Fatalf("dead letter %+v; want the event %s of s1 at step 4", dl, env.ID)
	}
	if dl.Service != svc || dl.Consumer != iterConsumer || dl.Deliveries != 1 || !strings.Contains(dl.Reason, "panicked: nil map") {
		t.Fatalf("dead letter says service %q, consumer %q, %d deliveries, reason %q", dl.Service, dl.Consumer, dl.Deliveries, dl.Reason)
	}

	subj := events.Subject(b.prefix, events.DefaultTeam, "s2", events.IterationCompleted)
	if err := b.nc.Publish(subj, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	dl = receive(t, got)
	if dl.Invalid == nil || !errors.Is(dl.Invalid, events.ErrInvalid) || dl.Session != "s2" || dl.Type != events.IterationCompleted || dl.Subject != subj {
		t.Fatalf("dead letter of an invalid event %+v; want session s2 and its type from the subject", dl)
	}
}

// A dead letter of the supervisor's own consumer is not handed to it
// again: it would fail the same way for ever.
func TestRunDeadLettersDropsItsOwn(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	calls := newCalls()
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- b.RunDeadLetters(ctx, "supervisor", func(_ context.Context, dl bus.DeadLetter) error {
			calls.add(dl.Event.ID)
			return bus.Permanent(errors.New("cannot handle it"))
		}, bus.RunOptions{AckWait: time.Second, Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	<-ready
	startRun(t, b, svc, only(func(context.Context, events.Envelope) error {
		return bus.Permanent(errors.New("no"))
	}), bus.RunOptions{AckWait: time.Second})
	env := iteration("s1", 1)
	b.publish(t, env)
	// The service's dead letter, then the supervisor's own.
	waitFor(t, "two dead letters", func() bool { return b.dlqMsgs(t) == 2 })
	time.Sleep(1500 * time.Millisecond) // more than AckWait: a redelivery would show
	if n := calls.get(env.ID); n != 1 {
		t.Fatalf("supervisor called %d times for %s, want once", n, env.ID)
	}
	if n := b.dlqMsgs(t); n != 2 {
		t.Fatalf("%d dead letters, want 2 (no loop)", n)
	}
}

func receive(t *testing.T, ch <-chan bus.DeadLetter) bus.DeadLetter {
	t.Helper()
	select {
	case dl := <-ch:
		return dl
	case <-time.After(waitDeadline):
		t.Fatal("no dead letter reached the supervisor")
		return bus.DeadLetter{}
	}
}
