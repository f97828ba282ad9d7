package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Handler handles one event. A nil error acks it; an error that IsPermanent
// terminates and dead-letters it; any other error naks it with backoff.
type Handler func(ctx context.Context, env events.Envelope) error

// RunOptions tune a service's consumers. Their tags are the one home of
// these defaults (RALPH_STREAM_*, through pkg/config).
type RunOptions struct {
	// AckWait is how long JetStream waits for an ack before redelivering;
	// long handlers keep it alive with InProgress every AckWait/3.
	AckWait time.Duration `split_words:"true" default:"30s" desc:"redelivery delay for an unacked event"`
	// MaxDeliver caps deliveries; the last failing one is dead-lettered.
	MaxDeliver int `split_words:"true" default:"5" desc:"deliveries before an event is dead-lettered"`
	// BackoffBase and BackoffMax bound the NakWithDelay backoff.
	BackoffBase time.Duration `split_words:"true" default:"500ms" desc:"first delay before a failed event is retried; it doubles per delivery"`
	BackoffMax  time.Duration `split_words:"true" default:"30s" desc:"longest delay before a failed event is retried"`
	// Concurrency is how many events one replica of a service handles at once.
	Concurrency int `split_words:"true" default:"16" desc:"events one replica of a service handles at once"`
	// DrainTimeout is how long in-flight handlers may finish after ctx ends
	// before their contexts are cancelled (and their messages left unacked
	// for redelivery). Zero is a valid choice (no grace), so Run does not
	// replace it with the default.
	DrainTimeout time.Duration `split_words:"true" default:"20s" desc:"grace for in-flight events on SIGTERM"`
	// OutageBudget is how long a handler whose servers are unavailable
	// (Redis or NATS unreachable, loading, read-only) is run again, with
	// the backoff above, before the event is given up on: an outage uses
	// up time, not deliveries (RideOut). Zero turns riding out off.
	OutageBudget time.Duration `split_words:"true" default:"5m" desc:"how long an event waits out a Redis or NATS outage (retried with backoff, kept from redelivery) before it is given up on and its session ended; 0: no waiting, an outage uses up deliveries"`
	// Observer, when set, is told the outcome of every event.
	Observer Observer `ignored:"true"`
	// Middlewares wrap every handler of the service, first outermost,
	// inside the runner's own Recoverer and Heartbeat.
	Middlewares []Middleware `ignored:"true"`
	// Ready, when set, is called once every consumer of the service exists
	// and is consuming: the service is running.
	Ready func() `ignored:"true"`
	// Working, when set, is told of the event being handled every
	// AckWait/3 while its handler runs (with the Heartbeat), so that
	// whoever watches a session for silence (the builder's watchdog) knows
	// a stage is at work on it. It must return quickly; its context ends
	// before the next beat.
	Working func(ctx context.Context, env events.Envelope) `ignored:"true"`
}

// Observer sees how each event was handled: outcome is ack, retry,
// dead_letter or interrupted.
type Observer interface {
	Handled(service, typ, outcome string, d time.Duration)
}

// defaults replaces zero (or negative) fields with their defaults, except
// DrainTimeout, for which zero means no grace.
func (o *RunOptions) defaults() {
	d := settings.Defaults[RunOptions]()
	if o.AckWait <= 0 {
		o.AckWait = d.AckWait
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = d.MaxDeliver
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = d.BackoffBase
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = d.BackoffMax
	}
	if o.Concurrency <= 0 {
		o.Concurrency = d.Concurrency
	}
}

// ConsumerName is the durable name of service's consumer. Every replica of
// a service shares it, which is what scales a stage on its own, and it is
// filtered to every event type the service handles, so that one number, its
// pending count, is the stage's whole backlog (what an autoscaler reads).
// Multi-filter consumers need nats-server 2.10 or newer.
func ConsumerName(service string) string { return service }

// LegacyConsumerName is the per-type durable of earlier versions (one
// consumer per service and event type); Run removes those of its service.
func LegacyConsumerName(service string, typ events.Type) string {
	return service + "_" + strings.ReplaceAll(string(typ), ".", "_")
}

// ErrServerTooOld is returned by Run when the server cannot filter one
// consumer on several subjects.
var ErrServerTooOld = errors.New("nats-server 2.10 or newer is needed (multi-filter consumers)")

// fetchWait bounds one pull request: how long an idle replica waits before
// it asks again, and so how long a shutdown may wait for the pull in flight.
const fetchWait = 5 * time.Second

// fetchHeartbeat is how often the server tells an open pull request it is
// still there. Two missed in a row (a pull the server lost, a connection
// that went quiet) end the pull with jetstream.ErrNoHeartbeat, and a new
// one is asked for at once, rather than wait out fetchWait with events
// pending and nobody pulling them.
const fetchHeartbeat = time.Second

// Run consumes the given event types for service until ctx ends, then drains:
// it stops fetching, lets in-flight handlers finish for DrainTimeout, and
// cancels the rest (their messages are redelivered to another replica).
func (b *Bus) Run(ctx context.Context, service string, handlers map[events.Type]Handler, o RunOptions) error {
	o.defaults()
	if len(handlers) == 0 {
		return fmt.Errorf("%s: no event types to consume", service)
	}
	name := ConsumerName(service)
	types := make([]events.Type, 0, len(handlers))
	for typ := range handlers {
		types = append(types, typ)
	}
	slices.Sort(types)
	filters := make([]string, len(types))
	for i, typ := range types {
		filters[i] = events.TypeFilter(b.prefix, typ)
	}
	w := b.newWorker(service, name, o)
	// The event's type picks its handler, each inside the runner's and the
	// service's middlewares. An event of a type the service does not
	// handle can only come on a matching subject with another type in its
	// envelope: it is dead-lettered.
	chained := make(map[events.Type]Handler, len(handlers))
	for typ, h := range handlers {
		chained[typ] = chain(h, o, w.log)
	}
	unhandled := chain(func(_ context.Context, env events.Envelope) error {
		return Permanent(fmt.Errorf("%s does not handle %s events", service, env.Type))
	}, o, w.log)
	w.prepare = func(msg jetstream.Msg) (events.Envelope, Handler, string, error) {
		env, err := events.Decode(msg.Data())
		if err != nil {
			return env, nil, "", err
		}
		if err := sameRoute(b.prefix, msg.Subject(), env); err != nil {
			return env, nil, "", err
		}
		if h, ok := chained[env.Type]; ok {
			return env, h, string(env.Type), nil
		}
		return env, unhandled, string(env.Type), nil
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "Ralph mesh " + service + ": every event type it handles",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxDeliver:    o.MaxDeliver,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if len(filters) == 1 {
		// One filter travels in the API subject, where a NATS permission
		// can pin it (docs/nats-permissions.md); several travel only in
		// the request body.
		cfg.FilterSubject = filters[0]
	} else {
		cfg.FilterSubjects = filters
	}
	return b.consume(ctx, service, []consumerSpec{{
		stream: events.StreamName(b.prefix),
		w:      w,
		cfg:    cfg,
		legacy: func(ctx context.Context) { b.removeLegacyConsumers(ctx, service, types) },
	}}, o)
}

// removeLegacyConsumers deletes the per-type durables earlier versions made
// for service: they would otherwise keep their place in the stream and show
// as a backlog nobody drains.
func (b *Bus) removeLegacyConsumers(ctx context.Context, service string, types []events.Type) {
	for _, typ := range types {
		legacy := LegacyConsumerName(service, typ)
		if err := b.js.DeleteConsumer(ctx, events.StreamName(b.prefix), legacy); err == nil {
			b.log.Info("removed the per-type consumer of an earlier version", zap.String("consumer", legacy))
		}
	}
}

// consumerSpec is one durable consumer of a service and the worker that
// handles its messages.
type consumerSpec struct {
	stream string
	cfg    jetstream.ConsumerConfig
	w      *worker
	// legacy, when set, tidies up after the consumer exists.
	legacy func(ctx context.Context)
}

func (b *Bus) newWorker(service, consumer string, o RunOptions) *worker {
	return &worker{bus: b, service: service, consumer: consumer, o: o,
		log: b.log.With(zap.String("service", service), zap.String("consumer", consumer))}
}

// consume runs the consumers of specs until ctx ends, then drains them
// (see Run).
//
// Each consumer is pulled with explicit batches sized to its free handler
// slots (Concurrency per consumer and replica): a replica never holds a
// message it has no worker for (such a message would age towards AckWait
// unseen, or block the client's delivery), and nothing a handler does can
// stall the pull, so a busy replica simply asks for less. (A consume
// callback that blocked on a shared semaphore once starved the pull at 500
// sessions until the missed-heartbeat timer re-issued it.)
func (b *Bus) consume(ctx context.Context, service string, specs []consumerSpec, o RunOptions) error {
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	var inflight sync.WaitGroup
	consumers := make([]jetstream.Consumer, len(specs))
	for i, spec := range specs {
		cons, err := b.js.CreateOrUpdateConsumer(ctx, spec.stream, spec.cfg)
		if err != nil {
			if errors.Is(err, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported) {
				return fmt.Errorf("%s: consumer %s: %w", service, spec.cfg.Durable, ErrServerTooOld)
			}
			return fmt.Errorf("%s: consumer %s: %w", service, spec.cfg.Durable, err)
		}
		if spec.legacy != nil {
			spec.legacy(ctx)
		}
		consumers[i] = cons
	}
	if o.Ready != nil {
		o.Ready()
	}
	var loops sync.WaitGroup
	for i, spec := range specs {
		loops.Add(1)
		go func() {
			defer loops.Done()
			b.pull(ctx, hctx, consumers[i], spec.w, o.Concurrency, &inflight)
		}()
	}
	loops.Wait()
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

// pull fetches from cons whatever w has free slots for, and hands each
// message to a handler goroutine (under hctx, which outlives ctx by the
// drain), until ctx ends.
func (b *Bus) pull(ctx, hctx context.Context, cons jetstream.Consumer, w *worker, concurrency int, inflight *sync.WaitGroup) {
	slots := make(chan struct{}, concurrency)
	pause := time.Duration(0)
	for ctx.Err() == nil {
		// Wait for one free slot, then take every other free one: the
		// batch asked for is what this replica can start at once.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		n := 1
	more:
		for n < concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		opts := []jetstream.FetchOpt{jetstream.FetchContext(fctx)}
		if deadline, _ := fctx.Deadline(); time.Until(deadline) >= 3*fetchHeartbeat {
			// nats.go refuses a heartbeat for a pull shorter than two of
			// them, and keeps a tenth of the time for itself: a ctx about
			// to end pulls without.
			opts = append(opts, jetstream.FetchHeartbeat(fetchHeartbeat))
		}
		batch, err := cons.Fetch(n, opts...)
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				inflight.Add(1)
				go func() {
					defer func() { <-slots; inflight.Done() }()
					w.handle(hctx, msg)
				}()
			}
			err = batch.Error()
		}
		cancel()
		for range n - got {
			<-slots
		}
		if ctx.Err() != nil {
			continue
		}
		if pause = nextPull(err, pause); pause == 0 {
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				w.log.Warn("pull request lost (missed heartbeats); asking again at once", zap.Error(err), zap.Int("batch", n), zap.Int("got", got))
			}
			continue
		}
		w.log.Warn("pull failed; asking again", zap.Error(err), zap.Duration("in", pause))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
	}
}

// nextPull is how long to wait before the next pull after one that ended
// with err, given the last wait: none after a pull that ended as pulls do
// (its batch, its time up, nothing to fetch) or that the server lost
// (missed heartbeats: a new pull is all it takes). The server being away
// (a restart, a partition) or the consumer being recreated gets a wait
// that grows, so a long outage does not spin.
func nextPull(err error, last time.Duration) time.Duration {
	switch {
	case err == nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, jetstream.ErrNoMessages), errors.Is(err, jetstream.ErrNoHeartbeat):
		return 0
	}
	return min(max(2*last, 100*time.Millisecond), 2*time.Second)
}

type worker struct {
	bus      *Bus
	service  string
	consumer string
	// prepare reads a message: the event it carries, the handler (inside
	// the chain) that handles it, and the type its metrics are counted
	// under; an error dead-letters the message at once.
	prepare func(msg jetstream.Msg) (events.Envelope, Handler, string, error)
	o       RunOptions
	log     *zap.Logger
}

// handle is one message: decode, the chain, then the outcome mapping.
func (w *worker) handle(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error("message without metadata", zap.Error(err))
		_ = msg.Term()
		return
	}
	env, h, typ, err := w.prepare(msg)
	if err != nil {
		w.deadLetter(ctx, msg, meta, err)
		w.observe("invalid", "dead_letter", 0)
		return
	}
	if h == nil {
		// Nothing to do with it (a dead letter of the dead-letter
		// consumer itself, which must not be handled again).
		_ = msg.Term()
		return
	}
	log := w.log.With(zap.String("session", env.Session), zap.String("task", env.Task),
		zap.Int("step", env.Step), zap.String("event", env.ID), zap.Uint64("delivery", meta.NumDelivered))

	d := delivery{n: int(meta.NumDelivered), max: w.o.MaxDeliver, ackWait: w.o.AckWait, inProgress: msg.InProgress, env: env}
	if w.o.Working != nil {
		d.working = func(ctx context.Context) { w.o.Working(ctx, env) }
	}
	began := time.Now()
	err = h(withDelivery(ctx, d), env)
	outcome := "ack"
	defer func() { w.observe(typ, outcome, time.Since(began)) }()

	switch {
	case err == nil:
		if aerr := msg.DoubleAck(context.WithoutCancel(ctx)); aerr != nil {
			log.Warn("ack failed; the event will be redelivered", zap.Error(aerr))
		}
	case ctx.Err() != nil && int(meta.NumDelivered) >= w.o.MaxDeliver:
		// JetStream will not deliver it again: keep it in the dead-letter
		// stream rather than lose it.
		outcome = "dead_letter"
		log.Warn("handler interrupted by shutdown on its last delivery", errorFields(err)...)
		w.deadLetter(ctx, msg, meta, fmt.Errorf("interrupted by shutdown on delivery %d of %d: %w", meta.NumDelivered, w.o.MaxDeliver, err))
	case ctx.Err() != nil:
		// The replica is stopping: leave the message unacked so another
		// replica redelivers it after AckWait.
		outcome = "interrupted"
		log.Info("handler interrupted by shutdown", errorFields(err)...)
	case IsPermanent(err):
		outcome = "dead_letter"
		log.Error("permanent failure", errorFields(err)...)
		w.deadLetter(ctx, msg, meta, err)
	case int(meta.NumDelivered) >= w.o.MaxDeliver:
		outcome = "dead_letter"
		log.Error("giving up after max deliveries", errorFields(err)...)
		w.deadLetter(ctx, msg, meta, fmt.Errorf("failed %d times, last: %w", meta.NumDelivered, err))
	default:
		outcome = "retry"
		delay := w.backoff(meta.NumDelivered)
		log.Warn("retrying", append(errorFields(err), zap.Duration("delay", delay))...)
		_ = msg.NakWithDelay(delay)
	}
}

// chain is what the runner calls for each event of a consumer: h inside
// RideOut (so an outage is waited out before h's own give-up policy sees
// it as its last word), inside the service's middlewares, inside
// OneAtATime (a redelivery waits for the handling at work on the same
// event), inside the runner's Heartbeat (which also covers the time the
// middlewares take, keeps the event while an outage is ridden out and keeps
// a waiting redelivery), inside the Recoverer (which also catches a
// panicking middleware).
func chain(h Handler, o RunOptions, log *zap.Logger) Handler {
	m := append([]Middleware{Recoverer, Heartbeat, OneAtATime()}, o.Middlewares...)
	m = append(m, RideOut(o.OutageBudget, o.BackoffBase, o.BackoffMax, log))
	return Chain(h, m...)
}

// errorFields log err, with the stack when it is a recovered panic.
func errorFields(err error) []zap.Field {
	fields := []zap.Field{zap.Error(err)}
	if p := panicOf(err); p != nil {
		fields = append(fields, zap.ByteString("stack", p.Stack))
	}
	return fields
}

func (w *worker) observe(typ, outcome string, d time.Duration) {
	if w.o.Observer != nil {
		w.o.Observer.Handled(w.service, typ, outcome, d)
	}
}

func (w *worker) backoff(delivered uint64) time.Duration {
	d := w.o.BackoffBase
	for i := uint64(1); i < delivered && d < w.o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, w.o.BackoffMax)
}

// deadLetter publishes the failed message with the reason (and the stack of
// a panic) to the dead-letter stream, then terminates it so it is not
// delivered again.
func (w *worker) deadLetter(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, reason error) {
	out := nats.NewMsg(events.DeadLetterSubject(w.bus.prefix, w.consumer))
	out.Data = msg.Data()
	out.Header.Set("Ralph-Reason", reason.Error())
	if p := panicOf(reason); p != nil {
		out.Header.Set("Ralph-Stack", stackHeader(p.Stack))
	}
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

// delivery is what the runner tells the middlewares about the message being
// handled: which delivery it is, and how to keep it from being redelivered
// while it is handled.
type delivery struct {
	n, max     int
	ackWait    time.Duration
	inProgress func() error
	// working, when set, is RunOptions.Working for this event.
	working func(ctx context.Context)
	// env is the event being handled.
	env events.Envelope
}

// Handling is the event whose handler ctx belongs to, for code below a
// handler that reports on its session (a model call being retried says so
// to the session's followers).
func Handling(ctx context.Context) (events.Envelope, bool) {
	d, ok := ctx.Value(deliveryKey{}).(delivery)
	return d.env, ok
}

// sameRoute refuses an event whose envelope names another team or session
// than the subject it came on. Permissions are given by subject (a team's
// users may publish only under their team), so an envelope claiming
// another team would otherwise put a session in a team its publisher may
// not use.
func sameRoute(prefix, subject string, env events.Envelope) error {
	team, session, _, ok := events.ParseSubject(prefix, subject)
	if !ok {
		return nil
	}
	if team != env.TeamOrDefault() || session != env.Session {
		return fmt.Errorf("%w: the envelope is team %s's session %s, the subject %s", events.ErrInvalid, env.TeamOrDefault(), env.Session, subject)
	}
	return nil
}

func withDelivery(ctx context.Context, d delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// LastDelivery reports whether the event being handled will not be
// delivered again if this attempt fails with a retryable error. GiveUp and
// Step use it to turn an outage into a clear outcome (a failed session)
// instead of a silent dead letter.
func LastDelivery(ctx context.Context) bool {
	d, ok := ctx.Value(deliveryKey{}).(delivery)
	return ok && d.n >= d.max
}
