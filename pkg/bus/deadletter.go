package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/events"
)

// DeadLetter is an event the runner gave up on, as the dead-letter stream
// keeps it: the event and the headers that say who gave up on it and why.
type DeadLetter struct {
	// Event is the event given up on. When the message was no valid event
	// (it was dead-lettered for that), Event holds what could be read of
	// its envelope, with the session and type of its subject, and Invalid
	// says why.
	Event   events.Envelope
	Invalid error
	// Team, Session and Type come from Event or, for an invalid one, from
	// the subject it was published on.
	Team    string
	Session string
	Type    events.Type
	// Reason is why it was given up on (Ralph-Reason); Service and
	// Consumer who gave up (Ralph-Service, Ralph-Consumer); Subject where
	// the event was (Ralph-Subject); Deliveries how often it was tried
	// (Ralph-Deliveries).
	Reason     string
	Service    string
	Consumer   string
	Subject    string
	Deliveries int
	// Stack is the head of a panic's stack (Ralph-Stack), when the handler
	// panicked.
	Stack string
	// Seq and Time are the dead letter's place in the dead-letter stream
	// and when it was put there, for the tools that list them (zero for a
	// dead letter being handled).
	Seq  uint64
	Time time.Time
}

// DeadLetterConsumer is the durable name of service's consumer of the
// dead-letter stream.
func DeadLetterConsumer(service string) string { return service + "_dlq" }

// RunDeadLetters hands fn every event dead-lettered from now on by any
// service of the mesh, through the same runner as Run (one durable consumer,
// DeadLetterConsumer(service), shared by the replicas; the same middlewares,
// acks, retries and drain), until ctx ends. A dead letter from this very
// consumer is dropped rather than handled: handling it would fail the same
// way, for ever. The consumer starts at new dead letters when it is first
// created, so a new deployment does not act on the dead letters of sessions
// that ended long ago.
func (b *Bus) RunDeadLetters(ctx context.Context, service string, fn func(context.Context, DeadLetter) error, o RunOptions) error {
	o.defaults()
	name := DeadLetterConsumer(service)
	w := b.newWorker(service, name, o)
	w.prepare = func(msg jetstream.Msg) (events.Envelope, Handler, string, error) {
		dl := ReadDeadLetter(b.prefix, msg.Headers(), msg.Data())
		if dl.Consumer == name {
			w.log.Error("dropping a dead letter of the dead-letter consumer itself",
				zap.String("reason", dl.Reason), zap.String("subject", dl.Subject))
			return dl.Event, nil, "", nil
		}
		h := chain(func(ctx context.Context, _ events.Envelope) error { return fn(ctx, dl) }, o, w.log)
		return dl.Event, h, "dead_letter", nil
	}
	return b.consume(ctx, service, []consumerSpec{{
		stream: events.DeadLetterStream(b.prefix),
		w:      w,
		cfg: jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: events.DeadLetters(b.prefix),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       o.AckWait,
			MaxDeliver:    o.MaxDeliver,
			DeliverPolicy: jetstream.DeliverNewPolicy,
		},
	}}, o)
}

// ReadDeadLetter reads a message of the dead-letter stream of prefix.
func ReadDeadLetter(prefix string, h nats.Header, data []byte) DeadLetter {
	get := h.Get
	dl := DeadLetter{
		Reason: get("Ralph-Reason"), Service: get("Ralph-Service"), Consumer: get("Ralph-Consumer"),
		Subject: get("Ralph-Subject"), Stack: get("Ralph-Stack"),
	}
	dl.Deliveries, _ = strconv.Atoi(get("Ralph-Deliveries"))
	dl.Event, dl.Invalid = events.Decode(data)
	if dl.Invalid == nil {
		dl.Team, dl.Session, dl.Type = dl.Event.TeamOrDefault(), dl.Event.Session, dl.Event.Type
		return dl
	}
	// Keep what the envelope says (its step, say) even though its payload
	// is not valid; the subject, which routed it, names the team and the
	// session.
	_ = json.Unmarshal(data, &dl.Event)
	if team, session, typ, ok := events.ParseSubject(prefix, dl.Subject); ok {
		dl.Team, dl.Session, dl.Type = team, session, typ
	}
	dl.Event.Team, dl.Event.Session, dl.Event.Type = dl.Team, dl.Session, dl.Type
	return dl
}

// The tools of `ralph dlq`: the dead letters as the stream keeps them, each
// named by its sequence in the dead-letter stream.

// ErrNoDeadLetter is wrapped when the dead-letter stream has no message of
// the sequence asked for.
var ErrNoDeadLetter = errors.New("no such dead letter")

// DeadLetters lists every dead letter the stream keeps, oldest first.
func (b *Bus) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	stream, err := b.js.Stream(ctx, events.DeadLetterStream(b.prefix))
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	if stream.CachedInfo().State.Msgs == 0 {
		return nil, nil
	}
	cons, err := b.js.OrderedConsumer(ctx, events.DeadLetterStream(b.prefix), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.DeadLetters(b.prefix)},
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	if cons.CachedInfo().NumPending == 0 {
		return nil, nil
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	defer it.Stop()
	var out []DeadLetter
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return out, fmt.Errorf("list dead letters: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return out, fmt.Errorf("list dead letters: metadata: %w", err)
		}
		dl := ReadDeadLetter(b.prefix, msg.Headers(), msg.Data())
		dl.Seq, dl.Time = meta.Sequence.Stream, meta.Timestamp
		out = append(out, dl)
		if meta.NumPending == 0 {
			return out, nil
		}
	}
}

// DeadLetterAt is the dead letter of sequence seq.
func (b *Bus) DeadLetterAt(ctx context.Context, seq uint64) (DeadLetter, []byte, error) {
	stream, err := b.js.Stream(ctx, events.DeadLetterStream(b.prefix))
	if err != nil {
		return DeadLetter{}, nil, fmt.Errorf("dead letter %d: %w", seq, err)
	}
	msg, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, nil, fmt.Errorf("dead letter %d: %w", seq, ErrNoDeadLetter)
	}
	if err != nil {
		return DeadLetter{}, nil, fmt.Errorf("dead letter %d: %w", seq, err)
	}
	dl := ReadDeadLetter(b.prefix, msg.Header, msg.Data)
	dl.Seq, dl.Time = msg.Sequence, msg.Time
	return dl, msg.Data, nil
}

// ErrNotResubmittable is wrapped when a dead letter cannot be published
// again: it names no session subject it came from.
var ErrNotResubmittable = errors.New("the dead letter names no session subject to publish it to")

// ResubmitDeadLetter publishes the event of dead letter seq again, as it
// was, to the subject it was published on (after whatever made it fail was
// fixed), then removes the dead letter. Its message id is the event's with
// "/resubmit-<seq>" added: the server would drop a message with the
// event's own id as a duplicate if it came within the duplicate window,
// and resubmitting the same dead letter twice in a row publishes it once.
// It returns the subject the event went to.
func (b *Bus) ResubmitDeadLetter(ctx context.Context, seq uint64) (DeadLetter, string, error) {
	dl, data, err := b.DeadLetterAt(ctx, seq)
	if err != nil {
		return dl, "", err
	}
	if _, _, _, ok := events.ParseSubject(b.prefix, dl.Subject); !ok {
		return dl, "", fmt.Errorf("resubmit dead letter %d (subject %q): %w", seq, dl.Subject, ErrNotResubmittable)
	}
	id := dl.Event.ID
	if id == "" {
		id = dl.Subject
	}
	if _, err := b.js.Publish(ctx, dl.Subject, data, jetstream.WithMsgID(fmt.Sprintf("%s/resubmit-%d", id, seq))); err != nil {
		return dl, "", fmt.Errorf("resubmit dead letter %d to %s: %w", seq, dl.Subject, err)
	}
	if err := b.DeleteDeadLetter(ctx, seq); err != nil {
		return dl, dl.Subject, err
	}
	return dl, dl.Subject, nil
}

// DeleteDeadLetter removes dead letter seq from the stream.
func (b *Bus) DeleteDeadLetter(ctx context.Context, seq uint64) error {
	stream, err := b.js.Stream(ctx, events.DeadLetterStream(b.prefix))
	if err != nil {
		return fmt.Errorf("delete dead letter %d: %w", seq, err)
	}
	if err := stream.DeleteMsg(ctx, seq); err != nil {
		// The server answers a delete of no message with "no message
		// found", which the client passes on as text only.
		if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "no message found") {
			return fmt.Errorf("delete dead letter %d: %w", seq, ErrNoDeadLetter)
		}
		return fmt.Errorf("delete dead letter %d: %w", seq, err)
	}
	return nil
}

// PurgeDeadLetters removes every dead letter; it returns how many there
// were.
func (b *Bus) PurgeDeadLetters(ctx context.Context) (uint64, error) {
	stream, err := b.js.Stream(ctx, events.DeadLetterStream(b.prefix))
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	n := stream.CachedInfo().State.Msgs
	if err := stream.Purge(ctx); err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	return n, nil
}
