package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// outage fails with an unavailable server n times, then succeeds.
type outage struct {
	n, calls int
}

func (o *outage) handle(context.Context, events.Envelope) error {
	o.calls++
	if o.calls <= o.n {
		return fmt.Errorf("load session s1: redis: %w", bus.Unavailable(errors.New("connection refused")))
	}
	return nil
}

func rideEvent() events.Envelope { return iteration("s1", 1) }

func TestRideOutWaitsOutAnOutage(t *testing.T) {
	o := &outage{n: 6}
	err := bus.RideOut(time.Minute, time.Millisecond, 4*time.Millisecond, nil)(o.handle)(context.Background(), rideEvent())
	if err != nil || o.calls != 7 {
		t.Fatalf("RideOut returned %v after %d calls; want success on the 7th, after six unavailable failures", err, o.calls)
	}
}

func TestRideOutGivesUpPastTheBudget(t *testing.T) {
	o := &outage{n: 1 << 30}
	err := bus.RideOut(30*time.Millisecond, time.Millisecond, 5*time.Millisecond, nil)(o.handle)(context.Background(), rideEvent())
	if !bus.IsPermanent(err) || bus.IsUnavailable(err) {
		t.Fatalf("RideOut returned %v; want a permanent error once the budget is spent", err)
	}
	if !strings.Contains(err.Error(), "outage budget of 30ms") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("error %q does not name the budget and the outage", err)
	}
	if o.calls < 2 {
		t.Fatalf("handler called %d times; want it tried again within the budget", o.calls)
	}
}

func TestRideOutLeavesOtherOutcomesAlone(t *testing.T) {
	boom := errors.New("model said 400")
	for name, tc := range map[string]struct {
		budget time.Duration
		err    error
	}{
		"success":                           {time.Minute, nil},
		"retryable error":                   {time.Minute, boom},
		"permanent error":                   {time.Minute, bus.Permanent(boom)},
		"permanent wrapping an unavailable": {time.Minute, bus.Permanent(bus.Unavailable(boom))},
		"unavailable with riding out off":   {0, bus.Unavailable(boom)},
	} {
		t.Run(name, func(t *testing.T) {
			calls := 0
			err := bus.RideOut(tc.budget, time.Millisecond, time.Millisecond, nil)(func(context.Context, events.Envelope) error {
				calls++
				return tc.err
			})(context.Background(), rideEvent())
			if calls != 1 || !errors.Is(err, tc.err) && err != tc.err {
				t.Fatalf("handler called %d times, returned %v; want once, with its own outcome %v", calls, err, tc.err)
			}
		})
	}
}

func TestRideOutStopsOnShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := bus.RideOut(time.Hour, time.Hour, time.Hour, nil)(func(context.Context, events.Envelope) error {
		calls++
		cancel() // the replica stops while the server is away
		return bus.Unavailable(errors.New("connection refused"))
	})(ctx, rideEvent())
	if !bus.IsUnavailable(err) || calls != 1 {
		t.Fatalf("RideOut returned %v after %d calls; want the outage returned at once (the runner leaves the event for another replica)", err, calls)
	}
}

func TestUnavailable(t *testing.T) {
	base := errors.New("connection refused")
	if bus.Unavailable(nil) != nil || bus.IsUnavailable(nil) || bus.IsUnavailable(base) {
		t.Fatal("nil or an unmarked error counts as unavailable")
	}
	u := fmt.Errorf("save: %w", bus.Unavailable(base))
	if !bus.IsUnavailable(u) || !errors.Is(u, base) || bus.IsPermanent(u) {
		t.Fatalf("a wrapped Unavailable: IsUnavailable %v, Is(base) %v, IsPermanent %v", bus.IsUnavailable(u), errors.Is(u, base), bus.IsPermanent(u))
	}
	if u.Error() != "save: connection refused" {
		t.Fatalf("Unavailable changed the text: %q", u)
	}
}

// Through the runner: an outage longer than every delivery's backoff
// together does not use the deliveries up; the event is handled once the
// server is back, on its first delivery.
func TestRunRidesOutAnOutageWithoutUsingDeliveries(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	o := &outage{n: 8}
	c := newCalls()
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		return o.handle(ctx, env)
	}), bus.RunOptions{AckWait: time.Second, MaxDeliver: 2, BackoffBase: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond,
		OutageBudget: time.Minute})
	env := iteration("s1", 1)
	b.publish(t, env)
	info := b.waitAcked(t, iterConsumer, 1)
	if n := c.get(env.ID); n != 9 {
		t.Fatalf("handler called %d times, want 9 (eight outages, then success)", n)
	}
	if info.NumRedelivered != 0 {
		t.Fatalf("NumRedelivered = %d: the outage used up deliveries", info.NumRedelivered)
	}
	if n := b.dlqMsgs(t); n != 0 {
		t.Fatalf("%d dead letters for an outage within the budget", n)
	}
}
