package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestGivingUp(t *testing.T) {
	cancelled, cancel := context.WithCancel(onDelivery(5, 5))
	cancel()
	transient, hopeless := errors.New("503"), Permanent(errors.New("401"))
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"success", onDelivery(5, 5), nil, false},
		{"retryable with deliveries left", onDelivery(1, 5), transient, false},
		{"retryable on the last delivery", onDelivery(5, 5), transient, true},
		{"permanent on the first delivery", onDelivery(1, 5), hopeless, true},
		{"wrapped permanent", onDelivery(1, 5), fmt.Errorf("critic model: %w", hopeless), true},
		{"invalid event", onDelivery(1, 5), events.ErrInvalid, true},
		{"permanent during shutdown", cancelled, hopeless, false},
		{"retryable during shutdown on the last delivery", cancelled, transient, false},
		{"retryable outside the runner", context.Background(), transient, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := GivingUp(tc.ctx, tc.err); got != tc.want {
				t.Errorf("GivingUp = %v, want %v", got, tc.want)
			}
		})
	}
}

// gaveUp records GiveUp's callback calls.
type gaveUp struct {
	calls int
	env   events.Envelope
	err   error
	fail  error // what the callback returns
}

func (g *gaveUp) fn(_ context.Context, env events.Envelope, err error) error {
	g.calls++
	g.env, g.err = env, err
	return g.fail
}

func failing(err error) Handler { return func(context.Context, events.Envelope) error { return err } }

func TestGiveUpSettlesWhatCannotSucceed(t *testing.T) {
	hopeless := Permanent(errors.New("401 invalid api key"))
	for name, tc := range map[string]struct {
		ctx context.Context
		err error
	}{
		"permanent":                      {onDelivery(1, 5), hopeless},
		"retryable on the last delivery": {onDelivery(5, 5), errors.New("503")},
	} {
		t.Run(name, func(t *testing.T) {
			var g gaveUp
			env := event(t)
			if err := GiveUp(g.fn)(failing(tc.err))(tc.ctx, env); err != nil {
				t.Fatalf("GiveUp returned %v, want nil (ack) after its callback succeeded", err)
			}
			if g.calls != 1 || g.env.ID != env.ID || !errors.Is(g.err, tc.err) {
				t.Fatalf("callback called %d times with %s, %v; want once with the event and the handler's error", g.calls, g.env.ID, g.err)
			}
		})
	}
}

func TestGiveUpLeavesTheRestToTheRunner(t *testing.T) {
	cancelled, cancel := context.WithCancel(onDelivery(5, 5))
	cancel()
	transient := errors.New("503")
	for name, tc := range map[string]struct {
		ctx context.Context
		err error
	}{
		"success":                        {onDelivery(5, 5), nil},
		"retryable with deliveries left": {onDelivery(1, 5), transient},
		"shutdown":                       {cancelled, Permanent(fmt.Errorf("killed: %w", context.Canceled))},
	} {
		t.Run(name, func(t *testing.T) {
			var g gaveUp
			if err := GiveUp(g.fn)(failing(tc.err))(tc.ctx, event(t)); err != tc.err {
				t.Fatalf("GiveUp returned %v, want the handler's %v unchanged", err, tc.err)
			}
			if g.calls != 0 {
				t.Fatalf("callback called %d times, want 0", g.calls)
			}
		})
	}
}

func TestGiveUpWhoseCallbackFails(t *testing.T) {
	hopeless := Permanent(errors.New("401 invalid api key"))
	for name, tc := range map[string]struct {
		fail          error
		wantPermanent bool
	}{
		// A publish that failed for now is tried again on the next delivery.
		"retryable": {errors.New("nats: timeout"), false},
		"permanent": {Permanent(errors.New("no such session")), true},
	} {
		t.Run(name, func(t *testing.T) {
			g := gaveUp{fail: tc.fail}
			err := GiveUp(g.fn)(failing(hopeless))(onDelivery(1, 5), event(t))
			if !errors.Is(err, tc.fail) || !strings.Contains(err.Error(), "401 invalid api key") {
				t.Fatalf("GiveUp returned %v, want the callback's error naming the handler's", err)
			}
			if IsPermanent(err) != tc.wantPermanent {
				t.Fatalf("IsPermanent(%v) = %v, want %v (the callback's error decides)", err, !tc.wantPermanent, tc.wantPermanent)
			}
		})
	}
}
