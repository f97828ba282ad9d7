package bus_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

func TestBootstrapCreatesStreams(t *testing.T) {
	t.Parallel()
	b := newBus(t) // bootstraps once

	s := b.streamInfo(t, events.StreamName(b.prefix))
	if got, want := s.Config.Subjects, []string{events.AllSessions(b.prefix)}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("session stream subjects = %v, want %v", got, want)
	}
	if s.Config.Retention != jetstream.LimitsPolicy {
		t.Errorf("session stream retention = %v, want limits (so sessions can be replayed)", s.Config.Retention)
	}
	if s.Config.Storage != jetstream.FileStorage {
		t.Errorf("session stream storage = %v, want file", s.Config.Storage)
	}
	if s.Config.Duplicates != 2*time.Minute {
		t.Errorf("session stream duplicate window = %v, want the 2m default", s.Config.Duplicates)
	}
	if s.Config.Replicas != 1 {
		t.Errorf("session stream replicas = %d, want 1", s.Config.Replicas)
	}

	d := b.streamInfo(t, events.DeadLetterStream(b.prefix))
	if got, want := d.Config.Subjects, []string{b.prefix + ".dlq.>"}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("dead-letter stream subjects = %v, want %v", got, want)
	}
	if d.Config.Retention != jetstream.LimitsPolicy || d.Config.Storage != jetstream.FileStorage {
		t.Errorf("dead-letter stream retention/storage = %v/%v, want limits/file", d.Config.Retention, d.Config.Storage)
	}
}

func TestBootstrapIsIdempotent(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	b.publish(t, iteration("s1", 1))

	// A second replica starting up bootstraps again: no error, no data lost.
	bootstrap(t, b, bus.StreamConfig{})
	bootstrap(t, connectBus(t, b.prefix), bus.StreamConfig{})
	if n := b.sessionMsgs(t); n != 1 {
		t.Fatalf("session stream holds %d messages after re-bootstrap, want 1", n)
	}

	// Bootstrap also updates an existing stream to the new configuration.
	bootstrap(t, b, bus.StreamConfig{MaxAge: time.Hour, DuplicateWindow: time.Minute})
	for _, name := range []string{events.StreamName(b.prefix), events.DeadLetterStream(b.prefix)} {
		info := b.streamInfo(t, name)
		if info.Config.MaxAge != time.Hour || info.Config.Duplicates != time.Minute {
			t.Errorf("%s: MaxAge/Duplicates = %v/%v after update, want 1h/1m", name, info.Config.MaxAge, info.Config.Duplicates)
		}
	}
	if n := b.sessionMsgs(t); n != 1 {
		t.Fatalf("session stream holds %d messages after update, want 1", n)
	}
}

func TestPublishBeforeBootstrapFails(t *testing.T) {
	t.Parallel()
	b := connectBus(t, meshtest.Prefix(t))
	err := b.Publish(ctxT(t), iteration("s1", 1))
	if err == nil {
		t.Fatal("Publish without a stream succeeded")
	}
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("Publish without a stream: %v, want it to wrap jetstream.ErrNoStreamResponse", err)
	}
}
