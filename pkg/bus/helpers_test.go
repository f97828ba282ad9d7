package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// waitDeadline bounds every poll; outcomes usually arrive in milliseconds,
// the margin is for slow CI machines and the race detector.
const waitDeadline = 20 * time.Second

// testBus is a bootstrapped bus on a fresh prefix of the test server.
type testBus struct {
	*bus.Bus
	nc     *nats.Conn
	prefix string
}

// newBus connects to the test server, bootstraps a fresh prefix and returns
// the bus; the connection is closed when the test ends.
func newBus(t *testing.T) *testBus {
	t.Helper()
	prefix := meshtest.Prefix(t)
	b := connectBus(t, prefix)
	bootstrap(t, b, bus.StreamConfig{})
	return b
}

// bootstrap runs b.Bootstrap, retrying a known nats-server 2.9 race: when
// the last stream of the account is deleted (another test's cleanup), the
// server removes the account's streams directory in the background, and a
// stream created at that moment fails with "error creating store for
// stream" (mkdir: no such file or directory). Newer servers create the
// directory with MkdirAll.
func bootstrap(t *testing.T, b *testBus, c bus.StreamConfig) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := b.Bootstrap(ctxT(t), c)
		if err == nil {
			return
		}
		var apiErr *jetstream.APIError
		if attempt < 10 && errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.ErrorCode(10049) {
			t.Logf("Bootstrap attempt %d hit the server's store directory race: %v", attempt, err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		t.Fatalf("Bootstrap: %v", err)
	}
}

// connectBus opens a second connection on an existing prefix, as another
// replica of a service would.
func connectBus(t *testing.T, prefix string) *testBus {
	t.Helper()
	nc, err := nats.Connect(meshtest.NATSURL(t), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.New(nc, prefix, zap.NewNop())
	if err != nil {
		t.Fatalf("bus.New: %v", err)
	}
	if b.Prefix() != prefix || b.Conn() != nc || b.JetStream() == nil {
		t.Fatalf("bus accessors do not reflect New's arguments")
	}
	return &testBus{Bus: b, nc: nc, prefix: prefix}
}

// ctxT is a context that ends with the test.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// iteration is a valid iteration.completed event of session at step (>= 1).
func iteration(session string, step int) events.Envelope {
	return events.Must(events.IterationCompleted, session, "t1", step, time.Now(),
		events.IterationRecord{Iteration: step})
}

func (b *testBus) publish(t *testing.T, envs ...events.Envelope) {
	t.Helper()
	for _, env := range envs {
		if err := b.Publish(ctxT(t), env); err != nil {
			t.Fatalf("Publish %s: %v", env.ID, err)
		}
	}
}

func (b *testBus) stream(t *testing.T, name string) jetstream.Stream {
	t.Helper()
	s, err := b.JetStream().Stream(ctxT(t), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s
}

func (b *testBus) streamInfo(t *testing.T, name string) *jetstream.StreamInfo {
	t.Helper()
	info, err := b.stream(t, name).Info(ctxT(t))
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info
}

// sessionMsgs is how many messages the session stream holds.
func (b *testBus) sessionMsgs(t *testing.T) uint64 {
	t.Helper()
	return b.streamInfo(t, events.StreamName(b.prefix)).State.Msgs
}

// dlqMsgs is how many messages the dead-letter stream holds.
func (b *testBus) dlqMsgs(t *testing.T) uint64 {
	t.Helper()
	return b.streamInfo(t, events.DeadLetterStream(b.prefix)).State.Msgs
}

func (b *testBus) consumerInfo(t *testing.T, consumer string) *jetstream.ConsumerInfo {
	t.Helper()
	info, err := b.tryConsumerInfo(t, consumer)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func (b *testBus) tryConsumerInfo(t *testing.T, consumer string) (*jetstream.ConsumerInfo, error) {
	t.Helper()
	c, err := b.JetStream().Consumer(ctxT(t), events.StreamName(b.prefix), consumer)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", consumer, err)
	}
	info, err := c.Info(ctxT(t))
	if err != nil {
		return nil, fmt.Errorf("consumer %s info: %w", consumer, err)
	}
	return info, nil
}

// waitAcked waits until consumer has been delivered and has acked n
// messages with nothing pending or unacked.
func (b *testBus) waitAcked(t *testing.T, consumer string, n uint64) *jetstream.ConsumerInfo {
	t.Helper()
	var info *jetstream.ConsumerInfo
	waitFor(t, "consumer "+consumer+" to ack everything", func() bool {
		i, err := b.tryConsumerInfo(t, consumer) // Run may not have created it yet
		if err != nil {
			return false
		}
		info = i
		return info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream >= n
	})
	return info
}

// deadLetter waits for the dead letter of consumer and returns it.
func (b *testBus) deadLetter(t *testing.T, consumer string) *jetstream.RawStreamMsg {
	t.Helper()
	subj := events.DeadLetterSubject(b.prefix, consumer)
	s := b.stream(t, events.DeadLetterStream(b.prefix))
	var msg *jetstream.RawStreamMsg
	waitFor(t, "a dead letter on "+subj, func() bool {
		m, err := s.GetLastMsgForSubject(ctxT(t), subj)
		if err != nil {
			return false
		}
		msg = m
		return true
	})
	return msg
}

// waitFor polls cond until it holds, failing the test after waitDeadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitDeadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runner is a Run in the background.
type runner struct {
	cancel context.CancelFunc
	done   chan error
}

// startRun starts b.Run for service; it is stopped (if still running) when
// the test ends.
func startRun(t *testing.T, b *testBus, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) *runner {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx, service, handlers, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitDeadline):
			t.Errorf("Run for %s did not return after cancel", service)
		}
	})
	return r
}

// stop cancels the Run and waits for it to return, failing the test when it
// returns an error.
func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(waitDeadline):
		t.Fatalf("Run did not return within %s of cancel", waitDeadline)
	}
}

// calls records handler invocations by event id.
type calls struct {
	mu    sync.Mutex
	byID  map[string]int
	order []string
}

func newCalls() *calls { return &calls{byID: map[string]int{}} }

func (c *calls) add(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byID[id]++
	c.order = append(c.order, id)
	return c.byID[id]
}

func (c *calls) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

func (c *calls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.order)
}

func (c *calls) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}
