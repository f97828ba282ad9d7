package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// panicsWith is a handler that panics with v; its name must show up in the
// stack the recoverer keeps.
func panicsWith(v any) bus.Handler {
	return func(context.Context, events.Envelope) error { panic(v) }
}

func TestRecovererMakesAPanicPermanentWithItsStack(t *testing.T) {
	err := bus.Recoverer(panicsWith("kaboom"))(context.Background(), iteration("s1", 1))
	if err == nil {
		t.Fatal("a panicking handler returned nil")
	}
	if !bus.IsPermanent(err) {
		t.Errorf("IsPermanent(%v) = false: a panic would be retried until MaxDeliver", err)
	}
	var p *bus.PanicError
	if !errors.As(err, &p) {
		t.Fatalf("%v (%T) is not a *bus.PanicError", err, err)
	}
	if p.Value != "kaboom" || err.Error() != "handler panicked: kaboom" {
		t.Errorf("panic value %v, error %q; want kaboom, \"handler panicked: kaboom\"", p.Value, err)
	}
	if !strings.Contains(string(p.Stack), "panicsWith") {
		t.Errorf("the stack does not name the panicking function:\n%s", p.Stack)
	}
}

func TestRecovererKeepsAnErrorPanicReachable(t *testing.T) {
	cause := errors.New("nil map")
	err := bus.Recoverer(panicsWith(cause))(context.Background(), iteration("s1", 1))
	if !errors.Is(err, cause) {
		t.Fatalf("errors.Is(%v, cause) = false, want the panic's error reachable", err)
	}
}

func TestRecovererLeavesReturnsAlone(t *testing.T) {
	transient := errors.New("transient")
	for _, want := range []error{nil, transient} {
		got := bus.Recoverer(func(context.Context, events.Envelope) error { return want })(context.Background(), iteration("s1", 1))
		if got != want {
			t.Errorf("Recoverer returned %v, want the handler's %v unchanged", got, want)
		}
	}
}
