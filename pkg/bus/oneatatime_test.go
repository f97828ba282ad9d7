package bus

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Two deliveries of one event never run at once: the second starts when the
// first has returned. Another event runs meanwhile, and a delivery whose
// context ends while it waits returns at once.
func TestOneAtATime(t *testing.T) {
	first := event(t)
	other := events.Must(events.IterationCompleted, "s2", "t1", 3, time.Now(), events.IterationRecord{Iteration: 3})
	var atWork, most atomic.Int32
	release := make(chan struct{})
	started := make(chan string, 4)
	h := OneAtATime()(func(ctx context.Context, env events.Envelope) error {
		n := atWork.Add(1)
		defer atWork.Add(-1)
		if env.ID == first.ID {
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
		}
		started <- env.ID
		if env.ID == first.ID {
			<-release
		}
		return nil
	})
	var wg sync.WaitGroup
	wg.Go(func() { _ = h(context.Background(), first) })
	if got := <-started; got != first.ID {
		t.Fatalf("started %s", got)
	}
	wg.Go(func() { _ = h(context.Background(), first) }) // the redelivery
	if err := h(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if got := <-started; got != other.ID {
		t.Fatalf("started %s while the first delivery was at work, want the other event", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h(ctx, first); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiting delivery whose context ended: %v", err)
	}
	select {
	case id := <-started:
		t.Fatalf("%s started while the first delivery was at work", id)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	if got := <-started; got != first.ID {
		t.Fatalf("started %s, want the redelivery", got)
	}
	if most.Load() != 1 {
		t.Fatalf("%d deliveries of one event at work at once", most.Load())
	}
}
