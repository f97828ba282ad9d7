package mesh

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/metrics"
	"github.com/ralphmesh/ralph/services/console"
)

// HasConsumer reports whether service pulls from a durable consumer of its
// own (bus.ConsumerName); the console follows the stream with an ordered
// consumer instead, so it has no backlog and nothing to bind.
func HasConsumer(service string) bool { return service != console.Name }

// watchNATS registers the probes of the NATS connection.
func (m *Mesh) watchNATS(nc *nats.Conn) {
	m.Health.Ready("nats", func(context.Context) error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("connection %s", strings.ToLower(s.String()))
		}
		return nil
	})
	// The client reconnects for ever (bus.Connect), so a closed connection
	// is one nothing will reopen: only a restart helps.
	m.Health.Live("nats", func(context.Context) error {
		if nc.IsClosed() {
			return errors.New("connection closed for good")
		}
		return nil
	})
}

// watchRedis registers the probe of Redis: it must answer a PING within
// the check's timeout.
func (m *Mesh) watchRedis() {
	m.Health.Ready("redis", func(ctx context.Context) error {
		if err := m.rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		return nil
	})
}

// backlog reads a consumer's backlog from JetStream for the gauges.
func (m *Mesh) backlog(ctx context.Context, consumer string) (metrics.Backlog, error) {
	c, err := m.Bus.JetStream().Consumer(ctx, events.StreamName(m.Config.Prefix), consumer)
	if err != nil {
		return metrics.Backlog{}, fmt.Errorf("consumer %s: %w", consumer, err)
	}
	info := c.CachedInfo()
	return metrics.Backlog{Pending: info.NumPending, AckPending: info.NumAckPending, Redelivered: info.NumRedelivered}, nil
}

// flight counts the events this process's handlers hold, for the lines a
// shutdown logs: how many were in hand when it began, and how many were
// left unacked for another replica.
type flight struct {
	inFlight    atomic.Int64
	interrupted atomic.Int64
}

// hold is a bus.Middleware counting the handlers running.
func (f *flight) hold(next bus.Handler) bus.Handler {
	return func(ctx context.Context, env events.Envelope) error {
		f.inFlight.Add(1)
		defer f.inFlight.Add(-1)
		return next(ctx, env)
	}
}

// observer counts the events the runner left to another replica at
// shutdown (outcome "interrupted") and passes every outcome on to the
// metrics.
type observer struct {
	metrics *metrics.Metrics
	flight  *flight
}

func (o observer) Handled(service, typ, outcome string, d time.Duration) {
	if outcome == "interrupted" {
		o.flight.interrupted.Add(1)
	}
	o.metrics.Handled(service, typ, outcome, d)
}
