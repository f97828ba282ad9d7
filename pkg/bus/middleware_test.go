package bus_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// trace is a middleware that records when it is entered and left.
func trace(name string, log *[]string) bus.Middleware {
	return func(h bus.Handler) bus.Handler {
		return func(ctx context.Context, env events.Envelope) error {
			*log = append(*log, name+" in")
			err := h(ctx, env)
			*log = append(*log, name+" out")
			return err
		}
	}
}

func TestChainRunsTheFirstMiddlewareOutermost(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	h := bus.Chain(func(context.Context, events.Envelope) error {
		log = append(log, "handler")
		return boom
	}, trace("a", &log), trace("b", &log))
	if err := h(context.Background(), iteration("s1", 1)); !errors.Is(err, boom) {
		t.Fatalf("chain returned %v, want the handler's error", err)
	}
	want := []string{"a in", "b in", "handler", "b out", "a out"}
	if !slices.Equal(log, want) {
		t.Fatalf("calls %v, want %v", log, want)
	}
}

func TestChainWithoutMiddlewareIsTheHandler(t *testing.T) {
	called := 0
	h := bus.Chain(func(context.Context, events.Envelope) error { called++; return nil })
	if err := h(context.Background(), iteration("s1", 1)); err != nil || called != 1 {
		t.Fatalf("err %v, handler called %d times; want nil, 1", err, called)
	}
}
