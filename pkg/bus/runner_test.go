package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

const svc = "svc"

// iterConsumer is the consumer of svc (for every type it handles).
var iterConsumer = bus.ConsumerName(svc)

func only(h bus.Handler) map[events.Type]bus.Handler {
	return map[events.Type]bus.Handler{events.IterationCompleted: h}
}

func TestConsumerName(t *testing.T) {
	for _, service := range []string{"builder", "critic", "stuckdetector", "pruner", "decomposer", "summarizer"} {
		name := bus.ConsumerName(service)
		// A durable name may not contain '.', '*', '>' or whitespace.
		if name != service || strings.ContainsAny(name, ".*> \t") {
			t.Errorf("ConsumerName(%q) = %q, want the service's name", service, name)
		}
	}
}

func TestRunAcksOnSuccess(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	var got atomic.Value
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		got.Store(env)
		return nil
	}), bus.RunOptions{AckWait: time.Second})

	env := iteration("s1", 1)
	b.publish(t, env)
	waitFor(t, "the handler to be called", func() bool { return c.total() == 1 })
	info := b.waitAcked(t, iterConsumer, 1)
	if info.NumRedelivered != 0 {
		t.Errorf("NumRedelivered = %d, want 0", info.NumRedelivered)
	}
	if info.Config.AckWait != time.Second || info.Config.MaxDeliver != 5 {
		t.Errorf("consumer AckWait/MaxDeliver = %v/%d, want 1s/5 (the default)", info.Config.AckWait, info.Config.MaxDeliver)
	}
	if h := got.Load().(events.Envelope); h.ID != env.ID || string(h.Data) != string(env.Data) {
		t.Errorf("handler got %+v, want %+v", h, env)
	}
	// Acked: never delivered again, even after AckWait.
	time.Sleep(1500 * time.Millisecond)
	if n := c.get(env.ID); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
	if n := b.dlqMsgs(t); n != 0 {
		t.Fatalf("dead-letter stream holds %d messages, want 0", n)
	}
}

func TestRunRetriesRetryableErrors(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	const base = 200 * time.Millisecond
	var (
		mu    sync.Mutex
		times []time.Time
	)
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if len(times) <= 2 {
			return errors.New("transient")
		}
		return nil
	}), bus.RunOptions{AckWait: time.Second, BackoffBase: base})

	b.publish(t, iteration("s1", 1))
	b.waitAcked(t, iterConsumer, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 3 {
		t.Fatalf("handler called %d times, want 3 (two failures, one success)", len(times))
	}
	// NakWithDelay backs off exponentially from BackoffBase.
	if gap := times[1].Sub(times[0]); gap < base {
		t.Errorf("first retry after %v, want at least BackoffBase %v", gap, base)
	}
	if gap := times[2].Sub(times[1]); gap < 2*base {
		t.Errorf("second retry after %v, want at least 2*BackoffBase %v", gap, 2*base)
	}
	if n := b.dlqMsgs(t); n != 0 {
		t.Fatalf("dead-letter stream holds %d messages, want 0", n)
	}
}

func TestRunDeadLettersPermanentFailure(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		return fmt.Errorf("step %d: %w", env.Step, bus.Permanent(errors.New("workspace vanished")))
	}), bus.RunOptions{AckWait: time.Second, BackoffBase: 50 * time.Millisecond})

	env := iteration("s1", 1)
	b.publish(t, env)
	dl := b.deadLetter(t, iterConsumer)
	if want := events.DeadLetterSubject(b.prefix, iterConsumer); dl.Subject != want {
		t.Errorf("dead letter subject = %q, want %q", dl.Subject, want)
	}
	if r := dl.Header.Get("Ralph-Reason"); !strings.Contains(r, "workspace vanished") {
		t.Errorf("Ralph-Reason = %q, want the handler's error", r)
	}
	for h, want := range map[string]string{
		"Ralph-Service":    svc,
		"Ralph-Consumer":   iterConsumer,
		"Ralph-Subject":    events.Subject(b.prefix, events.DefaultTeam, "s1", events.IterationCompleted),
		"Ralph-Deliveries": "1",
	} {
		if got := dl.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if got, err := events.Decode(dl.Data); err != nil || got.ID != env.ID {
		t.Errorf("dead letter carries %q (%v), want the original event %s", dl.Data, err, env.ID)
	}

	// Terminated: not redelivered, not retried, nothing left pending.
	b.waitAcked(t, iterConsumer, 1)
	time.Sleep(2500 * time.Millisecond) // more than twice AckWait
	if n := c.get(env.ID); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
	info := b.consumerInfo(t, iterConsumer)
	if info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("consumer NumAckPending/NumRedelivered = %d/%d, want 0/0", info.NumAckPending, info.NumRedelivered)
	}
	if n := b.dlqMsgs(t); n != 1 {
		t.Errorf("dead-letter stream holds %d messages, want 1", n)
	}
}

func TestRunDeadLettersInvalidEnvelope(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		return nil
	}), bus.RunOptions{AckWait: time.Second})

	subj := events.Subject(b.prefix, events.DefaultTeam, "s1", events.IterationCompleted)
	if err := b.nc.Publish(subj, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	dl := b.deadLetter(t, iterConsumer)
	if string(dl.Data) != "not json" {
		t.Errorf("dead letter carries %q, want the raw message", dl.Data)
	}
	if r := dl.Header.Get("Ralph-Reason"); !strings.Contains(r, "not JSON") {
		t.Errorf("Ralph-Reason = %q, want the decode error", r)
	}
	if got := dl.Header.Get("Ralph-Subject"); got != subj {
		t.Errorf("Ralph-Subject = %q, want %q", got, subj)
	}

	// JSON that is not a valid envelope (unknown type) is dead-lettered too.
	bad := iteration("s1", 2)
	bad.Type = "no.such.type"
	if err := b.nc.Publish(subj, bad.Marshal()); err != nil {
		t.Fatal(err)
	}
	// A valid event after them is handled: the runner is not stuck.
	good := iteration("s1", 3)
	b.publish(t, good)
	waitFor(t, "the valid event to be handled", func() bool { return c.get(good.ID) == 1 })
	waitFor(t, "two dead letters", func() bool { return b.dlqMsgs(t) == 2 })
	b.waitAcked(t, iterConsumer, 3)
	if n := c.total(); n != 1 {
		t.Fatalf("handler called %d times, want 1 (only for the valid event)", n)
	}
}

func TestRunDeadLettersAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		return errors.New("llm overloaded")
	}), bus.RunOptions{AckWait: time.Second, MaxDeliver: 2, BackoffBase: 50 * time.Millisecond})

	env := iteration("s1", 1)
	b.publish(t, env)
	dl := b.deadLetter(t, iterConsumer)
	r := dl.Header.Get("Ralph-Reason")
	if !strings.Contains(r, "failed 2 times") || !strings.Contains(r, "llm overloaded") {
		t.Errorf("Ralph-Reason = %q, want \"failed 2 times\" and the last error", r)
	}
	if got := dl.Header.Get("Ralph-Deliveries"); got != "2" {
		t.Errorf("Ralph-Deliveries = %q, want 2", got)
	}
	b.waitAcked(t, iterConsumer, 1)
	time.Sleep(1500 * time.Millisecond) // more than AckWait and the backoff
	if n := c.get(env.ID); n != 2 {
		t.Fatalf("handler called %d times, want exactly MaxDeliver = 2", n)
	}
	if n := b.dlqMsgs(t); n != 1 {
		t.Errorf("dead-letter stream holds %d messages, want 1", n)
	}
}

func TestRunSurvivesPanickingHandler(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		if env.Step == 1 {
			panic("kaboom")
		}
		return nil
	}), bus.RunOptions{AckWait: time.Second, Concurrency: 1})

	first, second := iteration("s1", 1), iteration("s1", 2)
	b.publish(t, first)
	dl := b.deadLetter(t, iterConsumer)
	if r := dl.Header.Get("Ralph-Reason"); !strings.Contains(r, "panicked") || !strings.Contains(r, "kaboom") {
		t.Errorf("Ralph-Reason = %q, want the panic", r)
	}
	// The stack says where: the panicking handler is this test's closure.
	if st := dl.Header.Get("Ralph-Stack"); !strings.Contains(st, "TestRunSurvivesPanickingHandler") || len(st) > 8<<10 {
		t.Errorf("Ralph-Stack (%d bytes) = %.300q, want the panicking function within 8 KiB", len(st), st)
	}
	b.publish(t, second)
	waitFor(t, "the next event to be handled", func() bool { return c.get(second.ID) == 1 })
	b.waitAcked(t, iterConsumer, 2)
	if n := c.get(first.ID); n != 1 {
		t.Errorf("panicking handler called %d times, want 1 (a panic is permanent)", n)
	}
}

func TestRunKeepsLongHandlerAlive(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	var interrupted atomic.Bool
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		select {
		case <-time.After(2500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			interrupted.Store(true)
			return ctx.Err()
		}
	}), bus.RunOptions{AckWait: time.Second})

	env := iteration("s1", 1)
	b.publish(t, env)
	info := b.waitAcked(t, iterConsumer, 1)
	if n := c.get(env.ID); n != 1 {
		t.Fatalf("handler called %d times, want 1: the event was redelivered while its handler ran", n)
	}
	if info.NumRedelivered != 0 {
		t.Errorf("NumRedelivered = %d, want 0", info.NumRedelivered)
	}
	if interrupted.Load() {
		t.Error("the handler's context was cancelled")
	}
}

func TestRunReplicasShareDurable(t *testing.T) {
	t.Parallel()
	a := newBus(t)
	b := connectBus(t, a.prefix)
	c := newCalls()
	var byReplica [2]atomic.Int32
	handler := func(replica int) bus.Handler {
		return func(ctx context.Context, env events.Envelope) error {
			c.add(env.ID)
			byReplica[replica].Add(1)
			time.Sleep(20 * time.Millisecond)
			return nil
		}
	}
	o := bus.RunOptions{AckWait: 2 * time.Second, Concurrency: 2}
	startRun(t, a, svc, only(handler(0)), o)
	startRun(t, b, svc, only(handler(1)), o)

	const n = 30
	for i := 1; i <= n; i++ {
		a.publish(t, iteration(fmt.Sprintf("s%d", i%3), i))
	}
	waitFor(t, "every event to be handled", func() bool { return c.distinct() == n })
	a.waitAcked(t, iterConsumer, n)
	if got := c.total(); got != n {
		t.Errorf("%d handler calls for %d events, want each handled exactly once", got, n)
	}
	c.mu.Lock()
	for id, k := range c.byID {
		if k != 1 {
			t.Errorf("event %s handled %d times", id, k)
		}
	}
	c.mu.Unlock()
	t.Logf("replica 0 handled %d, replica 1 handled %d", byReplica[0].Load(), byReplica[1].Load())

	s := a.stream(t, events.StreamName(a.prefix))
	var consumers []string
	lister := s.ConsumerNames(ctxT(t))
	for name := range lister.Name() {
		consumers = append(consumers, name)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if len(consumers) != 1 || consumers[0] != iterConsumer {
		t.Errorf("stream consumers = %v, want the one shared durable %s", consumers, iterConsumer)
	}
}

func TestRunDrainLetsInflightHandlerFinish(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	started := make(chan struct{})
	var once sync.Once
	var finished, cancelled atomic.Bool
	r := startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		once.Do(func() { close(started) })
		select {
		case <-time.After(time.Second):
			finished.Store(true)
			return nil
		case <-ctx.Done():
			cancelled.Store(true)
			return ctx.Err()
		}
	}), bus.RunOptions{AckWait: 2 * time.Second, DrainTimeout: 15 * time.Second})

	b.publish(t, iteration("s1", 1))
	waitStarted(t, started)
	r.stop(t)
	if cancelled.Load() {
		t.Fatal("the in-flight handler's context was cancelled within DrainTimeout")
	}
	if !finished.Load() {
		t.Fatal("Run returned before its in-flight handler finished")
	}
	b.waitAcked(t, iterConsumer, 1)
}

func TestRunWithoutDrainLeavesMessageForRedelivery(t *testing.T) {
	t.Parallel()
	for name, interrupted := range map[string]func(ctx context.Context) error{
		"handler returns ctx error": func(ctx context.Context) error { return ctx.Err() },
		// Shutdown takes precedence: a handler that reports its cancelled
		// work as permanent must not get the event dead-lettered.
		"handler returns permanent error": func(ctx context.Context) error {
			return bus.Permanent(fmt.Errorf("command killed: %w", ctx.Err()))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRunWithoutDrain(t, interrupted)
		})
	}
}

func testRunWithoutDrain(t *testing.T, interrupted func(ctx context.Context) error) {
	b := newBus(t)
	started := make(chan struct{})
	var once sync.Once
	var cancelled atomic.Bool
	first := newCalls()
	obs := &observer{}
	r := startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		first.add(env.ID)
		once.Do(func() { close(started) })
		<-ctx.Done()
		cancelled.Store(true)
		return interrupted(ctx)
	}), bus.RunOptions{AckWait: time.Second, Observer: obs}) // DrainTimeout 0

	env := iteration("s1", 1)
	b.publish(t, env)
	waitStarted(t, started)
	r.stop(t)
	if !cancelled.Load() {
		t.Fatal("Run returned without cancelling its in-flight handler")
	}
	if got, _ := obs.snapshot(); len(got) != 1 || got[svc+" "+string(events.IterationCompleted)+" interrupted"] != 1 {
		t.Errorf("observer saw %v, want one interrupted event", got)
	}
	if info := b.consumerInfo(t, iterConsumer); info.AckFloor.Stream != 0 {
		t.Fatalf("interrupted message was acked (ack floor %d)", info.AckFloor.Stream)
	}

	// Another replica of the service picks it up after AckWait.
	other := connectBus(t, b.prefix)
	second := newCalls()
	startRun(t, other, svc, only(func(ctx context.Context, env events.Envelope) error {
		second.add(env.ID)
		return nil
	}), bus.RunOptions{AckWait: time.Second})
	waitFor(t, "the interrupted event to be redelivered", func() bool { return second.get(env.ID) == 1 })
	b.waitAcked(t, iterConsumer, 1)
	if n := first.get(env.ID); n != 1 {
		t.Errorf("the stopped runner handled the event %d times, want 1", n)
	}
	if n := b.dlqMsgs(t); n != 0 {
		t.Errorf("an interrupted event was dead-lettered (%d messages)", n)
	}
}

// An event fetched by a runner but not started when its context ends (all
// handler slots busy) is not started during the drain nor after Run
// returns; another replica gets it.
func TestRunStartsNoHandlerAfterShutdown(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	started := make(chan struct{})
	var once sync.Once
	var stopping, lateStarts, running atomic.Int32
	first := newCalls()
	r := startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		running.Add(1)
		defer running.Add(-1)
		first.add(env.ID)
		if stopping.Load() == 1 {
			lateStarts.Add(1)
		}
		once.Do(func() { close(started) })
		select {
		case <-time.After(500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), bus.RunOptions{AckWait: 2 * time.Second, Concurrency: 1, DrainTimeout: 10 * time.Second})

	e1, e2 := iteration("s1", 1), iteration("s1", 2)
	b.publish(t, e1)
	waitStarted(t, started)
	b.publish(t, e2)
	// The runner's only slot is busy with e1: e2 waits in the stream (the
	// runner asks only for what it can start) until shutdown.
	waitFor(t, "e2 to wait in the stream", func() bool {
		info, err := b.tryConsumerInfo(t, iterConsumer)
		return err == nil && info.NumAckPending == 1 && info.NumPending == 1
	})
	stopping.Store(1)
	r.stop(t)
	if n := running.Load(); n != 0 {
		t.Fatalf("%d handlers still running after Run returned", n)
	}
	if n := lateStarts.Load(); n != 0 {
		t.Fatalf("%d handlers started after Run's context ended", n)
	}
	if n := first.get(e1.ID); n != 1 {
		t.Fatalf("in-flight event handled %d times, want 1", n)
	}

	other := connectBus(t, b.prefix)
	second := newCalls()
	startRun(t, other, svc, only(func(ctx context.Context, env events.Envelope) error {
		second.add(env.ID)
		return nil
	}), bus.RunOptions{AckWait: 2 * time.Second})
	waitFor(t, "the unstarted event to reach the other replica", func() bool { return second.get(e2.ID) == 1 })
	b.waitAcked(t, iterConsumer, 2)
	if n := second.get(e1.ID); n != 0 {
		t.Errorf("the drained event %s was handled again by the other replica", e1.ID)
	}
	time.Sleep(200 * time.Millisecond) // a late handler of the stopped runner would show up here
	if n := lateStarts.Load(); n != 0 {
		t.Fatalf("%d handlers started after Run returned", n)
	}
}

// One durable consumer per service, filtered to every type it handles:
// its pending count is the stage's whole backlog. Each event reaches the
// handler of its own type; a type the service does not handle never
// reaches it.
func TestRunOneConsumerForEveryType(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	var mu sync.Mutex
	got := map[events.Type][]events.Type{}
	record := func(as events.Type) bus.Handler {
		return func(ctx context.Context, env events.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			got[as] = append(got[as], env.Type)
			return nil
		}
	}
	startRun(t, b, svc, map[events.Type]bus.Handler{
		events.IterationCompleted: record(events.IterationCompleted),
		events.TaskCompleted:      record(events.TaskCompleted),
	}, bus.RunOptions{AckWait: time.Second})

	b.publish(t,
		iteration("s1", 1),
		events.Must(events.TaskCompleted, "s1", "t1", 2, time.Now(), events.TaskCompletedData{TaskID: "t1"}),
		events.Must(events.SessionCompleted, "s1", "", 3, time.Now(), events.SessionCompletedData{Tasks: 1}),
	)
	info := b.waitAcked(t, bus.ConsumerName(svc), 2)
	if len(info.Config.FilterSubjects) != 2 {
		t.Errorf("consumer filters = %v, want the two handled types", info.Config.FilterSubjects)
	}
	mu.Lock()
	for _, typ := range []events.Type{events.IterationCompleted, events.TaskCompleted} {
		if len(got[typ]) != 1 || got[typ][0] != typ {
			t.Errorf("%s handler got %v, want exactly one %s", typ, got[typ], typ)
		}
	}
	mu.Unlock()
	s := b.stream(t, events.StreamName(b.prefix))
	var consumers []string
	lister := s.ConsumerNames(ctxT(t))
	for name := range lister.Name() {
		consumers = append(consumers, name)
	}
	if len(consumers) != 1 || consumers[0] != bus.ConsumerName(svc) {
		t.Errorf("stream consumers = %v, want only %s", consumers, bus.ConsumerName(svc))
	}
}

// The per-type durables of earlier versions are removed when the service
// starts: they would show as a backlog nobody drains.
func TestRunRemovesLegacyPerTypeConsumers(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	legacy := svc + "_iteration_completed"
	if _, err := b.JetStream().CreateOrUpdateConsumer(ctxT(t), events.StreamName(b.prefix), jetstream.ConsumerConfig{
		Durable: legacy, FilterSubject: events.TypeFilter(b.prefix, events.IterationCompleted), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	c := newCalls()
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error { c.add(env.ID); return nil }), bus.RunOptions{AckWait: time.Second})
	b.publish(t, iteration("s1", 1))
	b.waitAcked(t, bus.ConsumerName(svc), 1)
	if _, err := b.JetStream().Consumer(ctxT(t), events.StreamName(b.prefix), legacy); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("legacy consumer %s still there (err %v)", legacy, err)
	}
}

// A replica whose every slot is busy asks for nothing, and one slot freed is
// one more event started: with a single slot held by a slow handler, the
// other events wait in the stream (not in the client, ageing towards
// AckWait) and are all handled, each once, once the slot frees.
func TestRunPullsOnlyWhatItCanStart(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	release := make(chan struct{})
	var first atomic.Bool
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		c.add(env.ID)
		return nil
	}), bus.RunOptions{AckWait: 2 * time.Second, Concurrency: 1})
	const n = 20
	for i := 1; i <= n; i++ {
		b.publish(t, iteration("s1", i))
	}
	waitFor(t, "the first event to be taken", func() bool { return first.Load() })
	// Wait past AckWait while the slot is held: nothing else may have been
	// pulled, so nothing is redelivered.
	time.Sleep(3 * time.Second)
	cons, err := b.JetStream().Consumer(ctxT(t), events.StreamName(b.prefix), bus.ConsumerName(svc))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending > 1 || info.NumRedelivered > 0 {
		t.Errorf("with one busy slot: %d events pulled and unacked, %d redelivered; want 1 and 0", info.NumAckPending, info.NumRedelivered)
	}
	close(release)
	waitFor(t, "every event to be handled", func() bool { return c.distinct() == n })
	if got := c.total(); got != n {
		t.Errorf("%d handler calls for %d events", got, n)
	}
}

func TestRunWithoutStreamFails(t *testing.T) {
	t.Parallel()
	b := connectBus(t, meshtest.Prefix(t)) // not bootstrapped
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	err := b.Run(ctx, svc, only(func(context.Context, events.Envelope) error { return nil }), bus.RunOptions{})
	if err == nil {
		t.Fatal("Run without a stream returned nil")
	}
	if ctx.Err() != nil {
		t.Fatalf("Run blocked until its context ended instead of failing: %v", err)
	}
}

func waitStarted(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(waitDeadline):
		t.Fatal("the handler was not called")
	}
}

// observer records RunOptions.Observer calls.
type observer struct {
	mu   sync.Mutex
	seen map[string]int // "service type outcome" -> count
	neg  int            // calls with a negative duration
}

func (o *observer) Handled(service, typ, outcome string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]int{}
	}
	o.seen[service+" "+typ+" "+outcome]++
	if d < 0 {
		o.neg++
	}
}

func (o *observer) snapshot() (map[string]int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.seen {
		out[k] = v
	}
	return out, o.neg
}

func TestRunObserverSeesOutcomes(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	obs := &observer{}
	c := newCalls()
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		n := c.add(env.ID)
		switch env.Step {
		case 2:
			if n == 1 {
				return errors.New("transient")
			}
		case 3:
			return bus.Permanent(errors.New("hopeless"))
		}
		return nil
	}), bus.RunOptions{AckWait: time.Second, BackoffBase: 50 * time.Millisecond, Observer: obs})

	b.publish(t, iteration("s1", 1), iteration("s1", 2), iteration("s1", 3))
	if err := b.nc.Publish(events.Subject(b.prefix, events.DefaultTeam, "s1", events.IterationCompleted), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	typ := string(events.IterationCompleted)
	want := map[string]int{
		svc + " " + typ + " ack":         2, // step 1, step 2 on its second delivery
		svc + " " + typ + " retry":       1, // step 2's first delivery
		svc + " " + typ + " dead_letter": 1, // step 3
		svc + " invalid dead_letter":     1, // the undecodable message
	}
	waitFor(t, "the observer to see every outcome", func() bool {
		got, _ := obs.snapshot()
		for k, n := range want {
			if got[k] < n {
				return false
			}
		}
		return true
	})
	b.waitAcked(t, iterConsumer, 4)
	got, neg := obs.snapshot()
	if len(got) != len(want) {
		t.Errorf("observer saw %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("observer saw %q %d times, want %d", k, got[k], n)
		}
	}
	if neg != 0 {
		t.Errorf("observer got %d negative durations", neg)
	}
}

// A handler interrupted by shutdown on the last delivery JetStream allows
// would never be delivered again: it is dead-lettered instead of lost.
func TestRunDeadLettersInterruptionOnLastDelivery(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	started := make(chan struct{})
	var once sync.Once
	r := startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	}), bus.RunOptions{AckWait: time.Second, MaxDeliver: 1}) // DrainTimeout 0
	b.publish(t, iteration("s1", 1))
	waitStarted(t, started)
	r.stop(t)
	dl := b.deadLetter(t, iterConsumer)
	if reason := dl.Header.Get("Ralph-Reason"); !strings.Contains(reason, "interrupted by shutdown on delivery 1 of 1") {
		t.Fatalf("dead-letter reason %q", reason)
	}
}

// A handler that gives up with a failure event has its event acked, not
// dead-lettered: the failure is the outcome.
func TestRunAcksWhatGiveUpSettled(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	c := newCalls()
	var settled sync.Map // event id -> the error given up on
	giveUp := bus.GiveUp(func(_ context.Context, env events.Envelope, err error) error {
		settled.Store(env.ID, err.Error())
		return nil
	})
	startRun(t, b, svc, only(giveUp(func(ctx context.Context, env events.Envelope) error {
		c.add(env.ID)
		if env.Step == 1 {
			return bus.Permanent(errors.New("401 invalid api key"))
		}
		return errors.New("503 upstream overloaded")
	})), bus.RunOptions{AckWait: time.Second, MaxDeliver: 2, BackoffBase: 50 * time.Millisecond})

	hopeless, outage := iteration("s1", 1), iteration("s1", 2)
	b.publish(t, hopeless, outage)
	b.waitAcked(t, iterConsumer, 2)
	for env, want := range map[*events.Envelope]struct {
		calls  int
		reason string
	}{
		&hopeless: {1, "401 invalid api key"},     // at once
		&outage:   {2, "503 upstream overloaded"}, // on its last delivery
	} {
		if n := c.get(env.ID); n != want.calls {
			t.Errorf("%s handled %d times, want %d", env.ID, n, want.calls)
		}
		if got, _ := settled.Load(env.ID); got != want.reason {
			t.Errorf("%s given up with %v, want %q", env.ID, got, want.reason)
		}
	}
	if n := b.dlqMsgs(t); n != 0 {
		t.Errorf("dead-letter stream holds %d messages, want 0", n)
	}
}

// RunOptions.Middlewares wrap every handler, first outermost, inside the
// runner's recoverer: a panicking middleware is dead-lettered with its stack
// like a panicking handler.
func TestRunAppliesTheServiceMiddlewares(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	var (
		mu    sync.Mutex
		trail []string
	)
	mark := func(name string) bus.Middleware {
		return func(h bus.Handler) bus.Handler {
			return func(ctx context.Context, env events.Envelope) error {
				if env.Step == 2 && name == "inner" {
					panic("middleware kaboom")
				}
				mu.Lock()
				trail = append(trail, fmt.Sprintf("%s %d", name, env.Step))
				mu.Unlock()
				return h(ctx, env)
			}
		}
	}
	startRun(t, b, svc, only(func(ctx context.Context, env events.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		trail = append(trail, fmt.Sprintf("handler %d", env.Step))
		return nil
	}), bus.RunOptions{AckWait: time.Second, Concurrency: 1, Middlewares: []bus.Middleware{mark("outer"), mark("inner")}})

	b.publish(t, iteration("s1", 1))
	b.waitAcked(t, iterConsumer, 1)
	b.publish(t, iteration("s1", 2))
	dl := b.deadLetter(t, iterConsumer)
	if r := dl.Header.Get("Ralph-Reason"); !strings.Contains(r, "middleware kaboom") {
		t.Errorf("Ralph-Reason = %q, want the middleware's panic", r)
	}
	if st := dl.Header.Get("Ralph-Stack"); !strings.Contains(st, "TestRunAppliesTheServiceMiddlewares") {
		t.Errorf("Ralph-Stack = %.300q, want the panicking middleware", st)
	}
	b.waitAcked(t, iterConsumer, 2)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"outer 1", "inner 1", "handler 1", "outer 2"}; !slices.Equal(trail, want) {
		t.Errorf("calls %v, want %v", trail, want)
	}
}
