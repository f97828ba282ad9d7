package bus_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

func TestPermanentNil(t *testing.T) {
	if err := bus.Permanent(nil); err != nil {
		t.Fatalf("Permanent(nil) = %v, want nil", err)
	}
	if bus.IsPermanent(nil) {
		t.Fatal("IsPermanent(nil) = true")
	}
}

func TestPermanentKeepsTheError(t *testing.T) {
	base := errors.New("workspace is gone")
	p := bus.Permanent(base)
	if p.Error() != base.Error() {
		t.Errorf("Permanent(err).Error() = %q, want %q", p.Error(), base.Error())
	}
	if !errors.Is(p, base) {
		t.Error("errors.Is(Permanent(err), err) = false, want the wrapped error reachable")
	}
}

func TestIsPermanent(t *testing.T) {
	base := errors.New("boom")
	_, decodeErr := events.Decode([]byte("not json"))
	_, newErr := events.New(events.Type("no.such.type"), "s1", "", 1, time.Time{}, struct{}{})
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"plain error", base, false},
		{"wrapped plain error", fmt.Errorf("step: %w", base), false},
		{"Permanent", bus.Permanent(base), true},
		{"Permanent wrapped by fmt.Errorf", fmt.Errorf("handler: %w", bus.Permanent(base)), true},
		{"Permanent twice", bus.Permanent(bus.Permanent(base)), true},
		{"events.ErrInvalid", events.ErrInvalid, true},
		{"wrapping events.ErrInvalid", fmt.Errorf("%w: field x", events.ErrInvalid), true},
		{"events.Decode failure", decodeErr, true},
		{"events.New failure", newErr, true},
		{"invalid session id", events.ValidSession("a b"), true},
		{"error that only mentions invalid", errors.New("invalid event"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("test case has a nil error")
			}
			if got := bus.IsPermanent(tc.err); got != tc.want {
				t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
