package bus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// event is a valid event for the middleware tests of this package.
func event(t *testing.T) events.Envelope {
	t.Helper()
	return events.Must(events.IterationCompleted, "s1", "t1", 3, time.Now(), events.IterationRecord{Iteration: 3})
}

// onDelivery is a context as the runner gives it to the chain for delivery
// n of max.
func onDelivery(n, max int) context.Context {
	return withDelivery(context.Background(), delivery{n: n, max: max})
}

func TestHeartbeatReportsProgressUntilTheHandlerReturns(t *testing.T) {
	var beats atomic.Int32
	ctx := withDelivery(context.Background(), delivery{n: 1, max: 5, ackWait: 30 * time.Millisecond,
		inProgress: func() error { beats.Add(1); return nil }})
	done := errors.New("done")
	err := Heartbeat(func(context.Context, events.Envelope) error {
		// A long handler: it returns once JetStream has been told three
		// times that it is still at work.
		deadline := time.Now().Add(20 * time.Second)
		for beats.Load() < 3 {
			if time.Now().After(deadline) {
				return errors.New("no heartbeat while the handler ran")
			}
			time.Sleep(time.Millisecond)
		}
		return done
	})(ctx, event(t))
	if !errors.Is(err, done) {
		t.Fatalf("Heartbeat returned %v, want the handler's error", err)
	}
	after := beats.Load()
	time.Sleep(100 * time.Millisecond) // ten intervals: a beat still running would show
	if n := beats.Load(); n != after {
		t.Fatalf("%d InProgress calls after the handler returned, want none", n-after)
	}
}

func TestHeartbeatOutsideTheRunnerOnlyRunsTheHandler(t *testing.T) {
	for name, ctx := range map[string]context.Context{
		"no delivery":          context.Background(),
		"delivery without msg": onDelivery(1, 5),
	} {
		t.Run(name, func(t *testing.T) {
			called := 0
			err := Heartbeat(func(context.Context, events.Envelope) error { called++; return nil })(ctx, event(t))
			if err != nil || called != 1 {
				t.Fatalf("err %v, handler called %d times; want nil, 1", err, called)
			}
		})
	}
}
