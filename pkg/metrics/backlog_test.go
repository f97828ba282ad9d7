package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

// The gauges are read at scrape time, per watched consumer, under a
// deadline; a consumer that cannot be read is reported down, without the
// other series.
func TestBacklogGauges(t *testing.T) {
	m := New()
	stats := map[string]Backlog{"builder": {Pending: 7, AckPending: 3, Redelivered: 1}}
	var deadline bool
	read := func(ctx context.Context, consumer string) (Backlog, error) {
		_, deadline = ctx.Deadline()
		b, ok := stats[consumer]
		if !ok {
			return Backlog{}, errors.New("consumer not found")
		}
		return b, nil
	}
	m.WatchBacklog(read, "builder")
	m.WatchBacklog(nil, "critic", "builder")
	// The second call replaced the reader with nil: nothing is read.
	if n := testutil.CollectAndCount(m.backlog); n != 0 {
		t.Fatalf("%d series without a reader", n)
	}
	m.WatchBacklog(read)
	want := `
# HELP ralph_consumer_ack_pending Events a service's consumer delivered that are not acknowledged yet (being handled, or waiting for redelivery).
# TYPE ralph_consumer_ack_pending gauge
ralph_consumer_ack_pending{consumer="builder"} 3
# HELP ralph_consumer_info_up 1 when the consumer's numbers could be read from JetStream at this scrape, 0 when not (the other ralph_consumer_* series are then absent).
# TYPE ralph_consumer_info_up gauge
ralph_consumer_info_up{consumer="builder"} 1
ralph_consumer_info_up{consumer="critic"} 0
# HELP ralph_consumer_pending Events in the stream a service's durable consumer has not delivered yet (with ack_pending, the stage's backlog). Every replica of a service reports the same consumer: aggregate with max, not sum.
# TYPE ralph_consumer_pending gauge
ralph_consumer_pending{consumer="builder"} 7
# HELP ralph_consumer_redelivered Unacknowledged events of a service's consumer that were delivered more than once.
# TYPE ralph_consumer_redelivered gauge
ralph_consumer_redelivered{consumer="builder"} 1
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want),
		"ralph_consumer_pending", "ralph_consumer_ack_pending", "ralph_consumer_redelivered", "ralph_consumer_info_up"); err != nil {
		t.Fatal(err)
	}
	if !deadline {
		t.Fatal("the reader got a context without a deadline")
	}
	// Numbers change between scrapes: they are read each time.
	stats["builder"] = Backlog{Pending: 0}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(`
# HELP ralph_consumer_pending Events in the stream a service's durable consumer has not delivered yet (with ack_pending, the stage's backlog). Every replica of a service reports the same consumer: aggregate with max, not sum.
# TYPE ralph_consumer_pending gauge
ralph_consumer_pending{consumer="builder"} 0
`), "ralph_consumer_pending"); err != nil {
		t.Fatal(err)
	}
	var nilMetrics *Metrics
	nilMetrics.WatchBacklog(nil, "x")
}

func TestServeRoutes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := New().Serve(ctx, "127.0.0.1:0", zap.NewNop(), Route{Path: "/readyz", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not yet"))
	})})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(strings.TrimSuffix(url, "/metrics") + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "not yet" {
		t.Fatalf("/readyz: %d %q", resp.StatusCode, body)
	}
}
