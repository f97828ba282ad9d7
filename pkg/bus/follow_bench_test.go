package bus_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
)

// BenchmarkFollow replays a session of 5,000 stored events through Follow
// (what `ralph run`, `ralph resume` and `ralph replay` do) and reports
// events/s; the target is at least 5,000.
func BenchmarkFollow(bm *testing.B) {
	const n = 5000
	prefix := meshtest.Prefix(bm)
	nc, err := nats.Connect(meshtest.NATSURL(bm))
	if err != nil {
		bm.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, prefix, zap.NewNop())
	if err != nil {
		bm.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := b.Bootstrap(ctx, bus.StreamConfig{}); err != nil {
		bm.Fatal(err)
	}
	js := b.JetStream()
	for step := 1; step <= n; step++ {
		env := iteration("bench", step)
		if step == n {
			env = events.Must(events.SessionCompleted, "bench", "", step, time.Now(), events.SessionCompletedData{Tasks: 1})
		}
		if _, err := js.PublishAsync(events.Subject(prefix, events.DefaultTeam, "bench", env.Type), env.Marshal(), jetstream.WithMsgID(env.ID)); err != nil {
			bm.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		bm.Fatal("publishing the session timed out")
	}
	bm.ResetTimer()
	for i := 0; i < bm.N; i++ {
		seen := 0
		if err := b.Follow(ctx, "bench", func(env events.Envelope) (bool, error) {
			seen++
			return env.Type.Terminal(), nil
		}); err != nil {
			bm.Fatal(err)
		}
		if seen != n {
			bm.Fatalf("followed %d events, want %d", seen, n)
		}
	}
	bm.ReportMetric(float64(n*bm.N)/bm.Elapsed().Seconds(), "events/s")
}

// BenchmarkFollowLive follows a team's sessions live (what `ralph watch`
// and the console do) while 5,000 events are published as fast as the
// server takes them, and reports the events/s the follower kept up with;
// the target is at least 5,000.
func BenchmarkFollowLive(bm *testing.B) {
	const n = 5000
	prefix := meshtest.Prefix(bm)
	nc, err := nats.Connect(meshtest.NATSURL(bm))
	if err != nil {
		bm.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, prefix, zap.NewNop())
	if err != nil {
		bm.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Bootstrap(ctx, bus.StreamConfig{}); err != nil {
		bm.Fatal(err)
	}
	web, err := b.ForTeam("web")
	if err != nil {
		bm.Fatal(err)
	}
	pub, err := nats.Connect(meshtest.NATSURL(bm))
	if err != nil {
		bm.Fatal(err)
	}
	defer pub.Close()
	js, err := jetstream.New(pub)
	if err != nil {
		bm.Fatal(err)
	}
	var seenN atomic.Int64
	bm.ResetTimer()
	for i := 0; i < bm.N; i++ {
		session := "live-" + strconv.Itoa(i)
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			seen := 0
			probed := false
			done <- web.FollowAll(ctx, bus.From{New: true}, func(ev bus.Stored) (bool, error) {
				if ev.Session == session+"-probe" && !probed {
					probed = true
					close(ready)
				}
				if ev.Session != session {
					return false, nil
				}
				seen++
				seenN.Store(int64(seen))
				return seen == n, nil
			})
		}()
		// Probes (each a new event) are published until the follower sees
		// one, so that none of the session's is published before it
		// follows.
		for probe := 1; ; probe++ {
			env := iteration(session+"-probe", probe).For("web")
			if _, err := js.Publish(ctx, events.Subject(prefix, "web", env.Session, env.Type), env.Marshal(), jetstream.WithMsgID(env.ID)); err != nil {
				bm.Fatal(err)
			}
			select {
			case <-ready:
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
		for step := 1; step <= n; step++ {
			env := iteration(session, step).For("web")
			if _, err := js.PublishAsync(events.Subject(prefix, "web", session, env.Type), env.Marshal(), jetstream.WithMsgID(env.ID)); err != nil {
				bm.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			bm.Fatalf("%v (seen %d)", err, seenN.Load())
		}
	}
	bm.ReportMetric(float64(n*bm.N)/bm.Elapsed().Seconds(), "events/s")
}
