package metrics

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// backlogTimeout bounds reading every watched consumer at one scrape, so
// that a NATS server that does not answer costs a scrape two seconds, not
// Prometheus's whole scrape timeout.
const backlogTimeout = 2 * time.Second

// Backlog is one durable consumer's queue as JetStream counts it.
type Backlog struct {
	// Pending: events in the stream the consumer has not been given yet.
	Pending uint64
	// AckPending: events given to a replica and not acknowledged yet.
	AckPending int
	// Redelivered: of those, events given more than once.
	Redelivered int
}

// BacklogReader reads a consumer's backlog (the mesh asks JetStream for the
// consumer's info).
type BacklogReader func(ctx context.Context, consumer string) (Backlog, error)

// backlog is a collector: the numbers are read when Prometheus scrapes, so
// they are never older than the scrape and cost nothing in between.
type backlog struct {
	pending, ackPending, redelivered, up *prometheus.Desc

	mu        sync.Mutex
	read      BacklogReader
	consumers []string
}

func newBacklog() *backlog {
	l := []string{"consumer"}
	return &backlog{
		pending: prometheus.NewDesc("ralph_consumer_pending",
			"Events in the stream a service's durable consumer has not delivered yet (with ack_pending, the stage's backlog). Every replica of a service reports the same consumer: aggregate with max, not sum.", l, nil),
		ackPending: prometheus.NewDesc("ralph_consumer_ack_pending",
			"Events a service's consumer delivered that are not acknowledged yet (being handled, or waiting for redelivery).", l, nil),
		redelivered: prometheus.NewDesc("ralph_consumer_redelivered",
			"Unacknowledged events of a service's consumer that were delivered more than once.", l, nil),
		up: prometheus.NewDesc("ralph_consumer_info_up",
			"1 when the consumer's numbers could be read from JetStream at this scrape, 0 when not (the other ralph_consumer_* series are then absent).", l, nil),
	}
}

// WatchBacklog adds consumers to the backlog gauges, read by read at each
// scrape. A process calls it for the consumers of the services it runs;
// calling it again adds more (read replaces the earlier reader).
func (m *Metrics) WatchBacklog(read BacklogReader, consumers ...string) {
	if m == nil {
		return
	}
	m.backlog.mu.Lock()
	defer m.backlog.mu.Unlock()
	m.backlog.read = read
	for _, c := range consumers {
		if !slices.Contains(m.backlog.consumers, c) {
			m.backlog.consumers = append(m.backlog.consumers, c)
		}
	}
}

func (b *backlog) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.pending
	ch <- b.ackPending
	ch <- b.redelivered
	ch <- b.up
}

func (b *backlog) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	read, consumers := b.read, slices.Clone(b.consumers)
	b.mu.Unlock()
	if read == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	for _, c := range consumers {
		bl, err := read(ctx, c)
		if err != nil {
			ch <- prometheus.MustNewConstMetric(b.up, prometheus.GaugeValue, 0, c)
			continue
		}
		ch <- prometheus.MustNewConstMetric(b.up, prometheus.GaugeValue, 1, c)
		ch <- prometheus.MustNewConstMetric(b.pending, prometheus.GaugeValue, float64(bl.Pending), c)
		ch <- prometheus.MustNewConstMetric(b.ackPending, prometheus.GaugeValue, float64(bl.AckPending), c)
		ch <- prometheus.MustNewConstMetric(b.redelivered, prometheus.GaugeValue, float64(bl.Redelivered), c)
	}
}
