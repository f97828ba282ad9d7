package bus_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

func TestPublishStoresEnvelopeOnItsSubject(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	env := iteration("s1", 3)
	b.publish(t, env)

	subj := events.Subject(b.prefix, events.DefaultTeam, "s1", events.IterationCompleted)
	msg, err := b.stream(t, events.StreamName(b.prefix)).GetLastMsgForSubject(ctxT(t), subj)
	if err != nil {
		t.Fatalf("no message on %s: %v", subj, err)
	}
	if got := msg.Header.Get(nats.MsgIdHdr); got != env.ID {
		t.Errorf("Nats-Msg-Id = %q, want the envelope id %q", got, env.ID)
	}
	got, err := events.Decode(msg.Data)
	if err != nil {
		t.Fatalf("stored message does not decode: %v", err)
	}
	if got.ID != env.ID || got.Type != env.Type || got.Session != env.Session || got.Step != env.Step ||
		!got.Time.Equal(env.Time) || string(got.Data) != string(env.Data) {
		t.Errorf("stored envelope = %+v, want %+v", got, env)
	}
}

func TestPublishDedupesByEnvelopeID(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	env := iteration("s1", 1)
	b.publish(t, env, env)
	if n := b.sessionMsgs(t); n != 1 {
		t.Fatalf("publishing the same envelope twice stored %d messages, want 1", n)
	}

	// A redelivered step rebuilds the event with the same deterministic id
	// (but a new time): still a duplicate.
	again := iteration("s1", 1)
	if again.ID != env.ID {
		t.Fatalf("ids differ: %q vs %q", again.ID, env.ID)
	}
	b.publish(t, again)
	if n := b.sessionMsgs(t); n != 1 {
		t.Fatalf("republishing a step's event stored %d messages, want 1", n)
	}

	// A different event is not a duplicate.
	b.publish(t, iteration("s1", 2))
	if n := b.sessionMsgs(t); n != 2 {
		t.Fatalf("stream holds %d messages after a distinct event, want 2", n)
	}
}

func TestPublishRefusesInvalidEnvelope(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	valid := iteration("s1", 1)

	unknownType := valid
	unknownType.Type = "no.such.type"
	noID := valid
	noID.ID = ""
	badSession := valid
	badSession.Session = "has.dots"
	badSchema := valid
	badSchema.Schema = events.SchemaVersion + 1
	noData := valid
	noData.Data = nil
	negativeStep := valid
	negativeStep.Step = -1

	for name, env := range map[string]events.Envelope{
		"unknown type": unknownType, "no id": noID, "bad session": badSession,
		"unsupported schema": badSchema, "no data": noData, "negative step": negativeStep,
	} {
		err := b.Publish(ctxT(t), env)
		if err == nil {
			t.Errorf("%s: Publish succeeded", name)
			continue
		}
		if !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s: Publish error %v does not wrap events.ErrInvalid", name, err)
		}
	}
	if n := b.sessionMsgs(t); n != 0 {
		t.Fatalf("invalid envelopes reached the stream: it holds %d messages", n)
	}
}

// An event over the server's max payload is refused before it is sent,
// with a permanent error that names it, so the runner gives up on the step
// at once instead of retrying a publish that can never succeed.
func TestPublishRefusesAnEventOverTheMaxPayload(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	limit := b.MaxPayload()
	if limit <= 0 {
		t.Fatalf("max payload %d", limit)
	}
	rec := events.IterationRecord{Iteration: 1, AssistantText: strings.Repeat("x", int(limit))}
	big := events.Must(events.IterationCompleted, "s1", "T1", 1, time.Now(), rec)
	err := b.Publish(ctxT(t), big)
	if err == nil {
		t.Fatal("an event over the max payload was published")
	}
	if !errors.Is(err, bus.ErrTooLarge) || !bus.IsPermanent(err) {
		t.Fatalf("error %v: want a permanent ErrTooLarge", err)
	}
	for _, want := range []string{big.ID, "iteration.completed", fmt.Sprint(limit)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if n := b.sessionMsgs(t); n != 0 {
		t.Fatalf("the stream holds %d messages", n)
	}

	// An event just at the limit, headers counted, is published.
	// One time for both encodings: RFC 3339 drops trailing zeros of the
	// nanoseconds, so two clock readings can differ in length.
	at := time.Now()
	fits := events.Must(events.IterationCompleted, "s1", "T1", 2, at, events.IterationRecord{Iteration: 2})
	pad := limit - bus.MessageSize(fits.ID, fits.Marshal()) - int64(len(`,"assistant_text":""`))
	fits = events.Must(events.IterationCompleted, "s1", "T1", 2, at, events.IterationRecord{Iteration: 2, AssistantText: strings.Repeat("y", int(pad))})
	if size := bus.MessageSize(fits.ID, fits.Marshal()); size != limit {
		t.Fatalf("test event is %d bytes, want exactly %d", size, limit)
	}
	if err := b.Publish(ctxT(t), fits); err != nil {
		t.Fatalf("an event of exactly the max payload: %v", err)
	}
}
