package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Handler handles one event. A nil error acks it; an error that IsPermanent
// terminates and dead-letters it; any other error naks it with backoff.
type Handler func(ctx context.Context, env events.Envelope) error

// RunOptions tune a service's consumers.
type RunOptions struct {
	// AckWait is how long JetStream waits for an ack before redelivering;
	// long handlers keep it alive with InProgress every AckWait/3.
	AckWait time.Duration
	// MaxDeliver caps deliveries; the last failing one is dead-lettered.
	MaxDeliver int
	// BackoffBase and BackoffMax bound the NakWithDelay backoff.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Concurrency is how many events one replica handles at once per consumer.
	Concurrency int
	// DrainTimeout is how long in-flight handlers may finish after ctx ends
	// before their contexts are cancelled (and their messages left unacked
	// for redelivery).
	DrainTimeout time.Duration
	// Observer, when set, is told the outcome of every event.
	Observer Observer
}

// Observer sees how each event was handled: outcome is ack, retry,
// dead_letter or interrupted.
type Observer interface {
	Handled(service, typ, outcome string, d time.Duration)
}

func (o *RunOptions) defaults() {
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = 5
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 500 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
}

// ConsumerName is the durable name of service's consumer for typ. Every
// replica of a service shares it, which is what scales a stage on its own.
// There is one consumer per event type rather than one multi-filter
// consumer per service because multi-filter consumers need nats-server 2.10.
func ConsumerName(service string, typ events.Type) string {
	return service + "_" + strings.ReplaceAll(string(typ), ".", "_")
}

// Run consumes the given event types for service until ctx ends, then drains:
// it stops fetching, lets in-flight handlers finish for DrainTimeout, and
// cancels the rest (their messages are redelivered to another replica).
func (b *Bus) Run(ctx context.Context, service string, handlers map[events.Type]Handler, o RunOptions) error {
	o.defaults()
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	var inflight sync.WaitGroup
	sem := make(chan struct{}, o.Concurrency*len(handlers))
	// stopping is set (under mu) once Run starts waiting for in-flight
	// handlers. ConsumeContext.Stop is asynchronous: the consume callback
	// can still be called with buffered messages afterwards, and it must
	// neither start a handler once shutdown began nor call inflight.Add
	// concurrently with inflight.Wait.
	var (
		mu       sync.Mutex
		stopping bool
	)
	start := func() bool {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if stopping || ctx.Err() != nil {
			<-sem
			return false
		}
		inflight.Add(1)
		return true
	}
	var consumes []jetstream.ConsumeContext
	stream := events.StreamName(b.prefix)
	for typ, h := range handlers {
		name := ConsumerName(service, typ)
		cons, err := b.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: events.TypeFilter(b.prefix, typ),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       o.AckWait,
			MaxDeliver:    o.MaxDeliver,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			for _, c := range consumes {
				c.Stop()
			}
			return fmt.Errorf("%s: consumer %s: %w", service, name, err)
		}
		w := &worker{bus: b, service: service, consumer: name, h: h, o: o,
			log: b.log.With(zap.String("service", service), zap.String("consumer", name))}
		cc, err := cons.Consume(func(msg jetstream.Msg) {
			if !start() {
				// Fetched but not started before shutdown: leave it
				// unacked, so JetStream redelivers it after AckWait. A Nak
				// would be redelivered at once, often to this stopping
				// replica's still-open pull request, and bounce until
				// MaxDeliver drops it.
				return
			}
			go func() {
				defer func() { <-sem; inflight.Done() }()
				w.handle(hctx, msg)
			}()
		}, jetstream.PullMaxMessages(o.Concurrency), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				b.log.Debug("consume", zap.String("consumer", name), zap.Error(err))
			}
		}))
		if err != nil {
			for _, c := range consumes {
				c.Stop()
			}
			return fmt.Errorf("%s: consume %s: %w", service, name, err)
		}
		consumes = append(consumes, cc)
	}
	<-ctx.Done()
	for _, c := range consumes {
		c.Stop()
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	done := make(chan struct{})
	go func() { inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.DrainTimeout):
		cancelHandlers()
		<-done
	}
	return nil
}

type worker struct {
	bus      *Bus
	service  string
	consumer string
	h        Handler
	o        RunOptions
	log      *zap.Logger
}

func (w *worker) handle(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error("message without metadata", zap.Error(err))
		_ = msg.Term()
		return
	}
	env, err := events.Decode(msg.Data())
	if err != nil {
		w.deadLetter(ctx, msg, meta, err)
		w.observe("invalid", "dead_letter", 0)
		return
	}
	log := w.log.With(zap.String("session", env.Session), zap.String("task", env.Task),
		zap.Int("step", env.Step), zap.String("event", env.ID), zap.Uint64("delivery", meta.NumDelivered))

	// Keep the message alive while a long handler (an LLM call, a shell
	// command) runs, so JetStream does not hand it to another replica.
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(w.o.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	began := time.Now()
	err = w.runSafely(withDelivery(ctx, int(meta.NumDelivered), w.o.MaxDeliver), env)
	close(stop)
	outcome := "ack"
	defer func() { w.observe(string(env.Type), outcome, time.Since(began)) }()

	switch {
	case err == nil:
		if aerr := msg.DoubleAck(context.WithoutCancel(ctx)); aerr != nil {
			log.Warn("ack failed; the event will be redelivered", zap.Error(aerr))
		}
	case ctx.Err() != nil && int(meta.NumDelivered) >= w.o.MaxDeliver:
		// JetStream will not deliver it again: keep it in the dead-letter
		// stream rather than lose it.
		outcome = "dead_letter"
		log.Warn("handler interrupted by shutdown on its last delivery", zap.Error(err))
		w.deadLetter(ctx, msg, meta, fmt.Errorf("interrupted by shutdown on delivery %d of %d: %w", meta.NumDelivered, w.o.MaxDeliver, err))
	case ctx.Err() != nil:
		// The replica is stopping: leave the message unacked so another
		// replica redelivers it after AckWait.
		outcome = "interrupted"
		log.Info("handler interrupted by shutdown", zap.Error(err))
	case IsPermanent(err):
		outcome = "dead_letter"
		log.Error("permanent failure", zap.Error(err))
		w.deadLetter(ctx, msg, meta, err)
	case int(meta.NumDelivered) >= w.o.MaxDeliver:
		outcome = "dead_letter"
		log.Error("giving up after max deliveries", zap.Error(err))
		w.deadLetter(ctx, msg, meta, fmt.Errorf("failed %d times, last: %w", meta.NumDelivered, err))
	default:
		outcome = "retry"
		delay := w.backoff(meta.NumDelivered)
		log.Warn("retrying", zap.Duration("delay", delay), zap.Error(err))
		_ = msg.NakWithDelay(delay)
	}
}

func (w *worker) observe(typ, outcome string, d time.Duration) {
	if w.o.Observer != nil {
		w.o.Observer.Handled(w.service, typ, outcome, d)
	}
}

func (w *worker) runSafely(ctx context.Context, env events.Envelope) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Errorf("handler panicked: %v", r))
		}
	}()
	return w.h(ctx, env)
}

func (w *worker) backoff(delivered uint64) time.Duration {
	d := w.o.BackoffBase
	for i := uint64(1); i < delivered && d < w.o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, w.o.BackoffMax)
}

// deadLetter publishes the failed message with the reason to the dead-letter
// stream, then terminates it so it is not delivered again.
func (w *worker) deadLetter(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, reason error) {
	out := nats.NewMsg(events.DeadLetterSubject(w.bus.prefix, w.consumer))
	out.Data = msg.Data()
	out.Header.Set("Ralph-Reason", reason.Error())
	out.Header.Set("Ralph-Service", w.service)
	out.Header.Set("Ralph-Consumer", w.consumer)
	out.Header.Set("Ralph-Subject", msg.Subject())
	out.Header.Set("Ralph-Deliveries", fmt.Sprint(meta.NumDelivered))
	out.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s/%d", w.consumer, meta.Sequence.Stream))
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := w.bus.js.PublishMsg(pctx, out); err != nil {
		// Without the dead letter the event would be lost: leave it for
		// redelivery instead of terminating it.
		w.log.Error("dead-letter publish failed", zap.Error(err))
		_ = msg.NakWithDelay(w.o.BackoffMax)
		return
	}
	_ = msg.Term()
}

type deliveryKey struct{}

type delivery struct{ n, max int }

func withDelivery(ctx context.Context, n, max int) context.Context {
	return context.WithValue(ctx, deliveryKey{}, delivery{n: n, max: max})
}

// LastDelivery reports whether the event being handled will not be
// delivered again if this attempt fails with a retryable error. A handler
// uses it to turn an outage into a clear outcome (a failed session) instead
// of a silent dead letter.
func LastDelivery(ctx context.Context) bool {
	d, ok := ctx.Value(deliveryKey{}).(delivery)
	return ok && d.n >= d.max
}
