package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// A poison event is dead-lettered; the tools of `ralph dlq` list it with
// why and who gave up, show it, and, once the handler is fixed, resubmit it
// so that it is handled (though the server still remembers its message
// id), then remove it; purge empties the stream.
func TestDeadLetterTools(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	if dls, err := b.DeadLetters(ctxT(t)); err != nil || len(dls) != 0 {
		t.Fatalf("no dead letters yet: %v %v", dls, err)
	}
	var fixed atomic.Bool
	handled := make(chan events.Envelope, 4)
	startRun(t, b, svc, only(func(_ context.Context, env events.Envelope) error {
		if !fixed.Load() {
			panic("poison: index out of range")
		}
		handled <- env
		return nil
	}), bus.RunOptions{AckWait: time.Second})

	poison := iteration("s1", 2).For("web")
	b.publish(t, poison)
	b.deadLetter(t, iterConsumer)
	// An invalid event, which can never be handled, is listed too.
	if err := b.nc.Publish(events.Subject(b.prefix, "web", "s2", events.IterationCompleted), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two dead letters", func() bool { return b.dlqMsgs(t) == 2 })

	dls, err := b.DeadLetters(ctxT(t))
	if err != nil || len(dls) != 2 {
		t.Fatalf("DeadLetters: %d %v", len(dls), err)
	}
	dl := dls[0]
	if dl.Seq != 1 || dl.Event.ID != poison.ID || dl.Team != "web" || dl.Session != "s1" || dl.Service != svc || dl.Consumer != iterConsumer ||
		!strings.Contains(dl.Reason, "poison: index out of range") || !strings.Contains(dl.Stack, "goroutine") || dl.Time.IsZero() || dl.Invalid != nil {
		t.Errorf("the poison's dead letter: %+v", dl)
	}
	if second := dls[1]; second.Seq != 2 || second.Invalid == nil || second.Session != "s2" || second.Team != "web" {
		t.Errorf("the invalid event's dead letter: %+v", second)
	}
	shown, raw, err := b.DeadLetterAt(ctxT(t), 1)
	if err != nil || shown.Event.ID != poison.ID || string(raw) != string(poison.Marshal()) {
		t.Errorf("DeadLetterAt(1): %+v %v", shown, err)
	}
	if _, _, err := b.DeadLetterAt(ctxT(t), 99); !errors.Is(err, bus.ErrNoDeadLetter) {
		t.Errorf("DeadLetterAt(99): %v", err)
	}

	// The fix: the event goes back to its subject and is handled.
	fixed.Store(true)
	_, subject, err := b.ResubmitDeadLetter(ctxT(t), 1)
	if err != nil || subject != events.Subject(b.prefix, "web", "s1", events.IterationCompleted) {
		t.Fatalf("ResubmitDeadLetter: %s %v", subject, err)
	}
	select {
	case env := <-handled:
		if env.ID != poison.ID {
			t.Errorf("handled %s", env.ID)
		}
	case <-time.After(waitDeadline):
		t.Fatal("the resubmitted event was not handled (dropped as a duplicate?)")
	}
	if n := b.dlqMsgs(t); n != 1 {
		t.Errorf("%d dead letters after the resubmit, want the invalid one only", n)
	}
	if _, _, err := b.ResubmitDeadLetter(ctxT(t), 1); !errors.Is(err, bus.ErrNoDeadLetter) {
		t.Errorf("resubmitting a removed dead letter: %v", err)
	}
	n, err := b.PurgeDeadLetters(ctxT(t))
	if err != nil || n != 1 || b.dlqMsgs(t) != 0 {
		t.Errorf("purge: %d %v, %d left", n, err, b.dlqMsgs(t))
	}
	if err := b.DeleteDeadLetter(ctxT(t), 2); !errors.Is(err, bus.ErrNoDeadLetter) {
		t.Errorf("deleting a purged dead letter: %v", err)
	}
}
