package bus

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// batch is a fetch's outcome: no messages, then err.
type batch struct{ err error }

func (b batch) Messages() <-chan jetstream.Msg {
	c := make(chan jetstream.Msg)
	close(c)
	return c
}
func (b batch) Error() error { return b.err }

// lossyConsumer is a durable consumer whose pulls end as fetches says, one
// per Fetch; past them it stops the loop.
type lossyConsumer struct {
	jetstream.Consumer
	mu      sync.Mutex
	fetches []error
	asked   []int
	stop    context.CancelFunc
}

func (c *lossyConsumer) Fetch(n int, _ ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, n)
	if len(c.asked) > len(c.fetches) {
		c.stop()
		return batch{}, nil
	}
	return batch{err: c.fetches[len(c.asked)-1]}, nil
}

// A pull the server lost (two missed heartbeats) is said in the log and
// asked for again at once, with every free slot: no wait that would leave
// events pending with nobody pulling them.
func TestMissedHeartbeatIsLoggedAndPulledAgainAtOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons := &lossyConsumer{fetches: []error{jetstream.ErrNoHeartbeat, jetstream.ErrNoHeartbeat}, stop: cancel}
	w := &worker{log: zap.New(core)}
	var inflight sync.WaitGroup
	(&Bus{}).pull(ctx, ctx, cons, w, 4, &inflight)

	if len(cons.asked) != 3 || cons.asked[1] != 4 || cons.asked[2] != 4 {
		t.Fatalf("pulls asked for %v, want three pulls of the 4 free slots", cons.asked)
	}
	lost := logs.FilterMessage("pull request lost (missed heartbeats); asking again at once").All()
	if len(lost) != 2 || lost[0].Level != zapcore.WarnLevel {
		t.Fatalf("log: %v, want a warning per lost pull", logs.All())
	}
	if n := logs.FilterMessage("pull failed; asking again").Len(); n != 0 {
		t.Errorf("a lost pull was waited on %d times", n)
	}
}

func TestNextPull(t *testing.T) {
	for _, c := range []struct {
		err  error
		last time.Duration
		want time.Duration
	}{
		{nil, time.Second, 0},
		{context.DeadlineExceeded, 0, 0},
		{nats.ErrTimeout, 0, 0},
		{jetstream.ErrNoMessages, 0, 0},
		{jetstream.ErrNoHeartbeat, 0, 0},
		{jetstream.ErrNoHeartbeat, time.Second, 0},
		{errors.New("nats: connection closed"), 0, 100 * time.Millisecond},
		{nats.ErrConnectionClosed, 400 * time.Millisecond, 800 * time.Millisecond},
		{jetstream.ErrConsumerDeleted, 2 * time.Second, 2 * time.Second},
	} {
		if got := nextPull(c.err, c.last); got != c.want {
			t.Errorf("nextPull(%v, %v) = %v, want %v", c.err, c.last, got, c.want)
		}
	}
}
