package meshbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/store"
)

// Floor is the least the step's work can cost on these servers, measured
// one piece after the other with nothing else running: the medians of
// each piece and of their sum.
type Floor struct {
	// Total is the median of a JetStream round trip + the Redis round
	// trips + the HTTP call, taken together.
	Total     time.Duration
	JetStream time.Duration
	Redis     time.Duration
	HTTP      time.Duration
	// RedisTrips is how many Redis round trips it makes: the mesh's per
	// step, rounded.
	RedisTrips int
}

// floorRounds is how many times the floor is measured (after as many
// again to warm the connections and the server's caches up).
const floorRounds = 300

// measureFloor measures the floor on the servers the mesh used, on
// connections of its own, with redisPerStep Redis round trips.
func measureFloor(ctx context.Context, srv *servers, prefix string, redisPerStep float64) (Floor, error) {
	f := Floor{RedisTrips: int(math.Round(redisPerStep))}
	nc, err := nats.Connect(srv.natsURL, nats.Name("ralph-bench-floor"))
	if err != nil {
		return f, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return f, err
	}
	name, subject := events.StreamName(prefix)+"_FLOOR", prefix+".floor"
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	if err != nil {
		return f, fmt.Errorf("floor stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	// A durable pull consumer with explicit acks, fetched from and acked
	// with a confirmed ack: what the services' runner does with an event.
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return f, fmt.Errorf("floor consumer: %w", err)
	}
	rdb, err := store.Connect(ctx, srv.redisURL)
	if err != nil {
		return f, err
	}
	defer rdb.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	body := []byte(`{"model":"builder","messages":[{"role":"user","content":"floor"}]}`)
	payload := bytes.Repeat([]byte("x"), 512)

	jsRound := func() error {
		if _, err := js.Publish(ctx, subject, payload); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			if err := msg.DoubleAck(ctx); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		if got != 1 {
			return errors.New("fetch: no message")
		}
		return nil
	}
	redisRounds := func() error {
		for range f.RedisTrips {
			if err := rdb.Get(ctx, prefix+":floor").Err(); err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("redis: %w", err)
			}
		}
		return nil
	}
	httpCall := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.modelURL+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("model: %w", err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return fmt.Errorf("model: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("model: %s", resp.Status)
		}
		return nil
	}

	var total, jsT, redisT, httpT []time.Duration
	for i := range 2 * floorRounds {
		t0 := time.Now()
		if err := jsRound(); err != nil {
			return f, err
		}
		t1 := time.Now()
		if err := redisRounds(); err != nil {
			return f, err
		}
		t2 := time.Now()
		if err := httpCall(); err != nil {
			return f, err
		}
		t3 := time.Now()
		if i >= floorRounds {
			total, jsT, redisT, httpT = append(total, t3.Sub(t0)), append(jsT, t1.Sub(t0)), append(redisT, t2.Sub(t1)), append(httpT, t3.Sub(t2))
		}
	}
	f.Total, f.JetStream, f.Redis, f.HTTP = median(total), median(jsT), median(redisT), median(httpT)
	return f, nil
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return percentile(d, 0.5)
}
