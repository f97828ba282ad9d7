// Package meshtest owns the test environment: a real NATS JetStream server
// (embedded from the nats-server module, or the external one named by
// RALPH_TEST_NATS_URL) and a real Redis (RALPH_TEST_REDIS_URL, default
// 127.0.0.1:6379), with a fresh subject prefix per test so tests never see
// each other's streams or keys.
package meshtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
)

var (
	embedOnce sync.Once
	embedURL  string
	embedErr  string
)

// NATSURL is the server tests use. The embedded one is shared by the tests
// of one package and lives as long as the test binary.
func NATSURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("RALPH_TEST_NATS_URL"); u != "" {
		return u
	}
	embedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ralph-test-js-")
		if err != nil {
			embedErr = err.Error()
			return
		}
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			embedErr = err.Error()
			return
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			embedErr = "embedded nats-server did not start"
			return
		}
		embedURL = srv.ClientURL()
	})
	if embedErr != "" {
		t.Fatalf("embedded NATS: %s", embedErr)
	}
	return embedURL
}

// RedisURL is the Redis tests use; the test fails with a hint when it is
// not reachable (scripts/test.sh starts one).
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("RALPH_TEST_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("RALPH_TEST_REDIS_URL %q: %v", u, err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s is not reachable (%v); run the tests with `bash scripts/test.sh`, which starts one", u, err)
	}
	return u
}

// Prefix is a fresh subject prefix / key namespace; its streams and keys are
// removed when the test ends.
func Prefix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	p := "t" + hex.EncodeToString(b)
	natsURL, redisURL := NATSURL(t), RedisURL(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if nc, err := nats.Connect(natsURL); err == nil {
			if js, err := jetstream.New(nc); err == nil {
				_ = js.DeleteStream(ctx, events.StreamName(p))
				_ = js.DeleteStream(ctx, events.DeadLetterStream(p))
			}
			nc.Close()
		}
		if opt, err := redis.ParseURL(redisURL); err == nil {
			rdb := redis.NewClient(opt)
			iter := rdb.Scan(ctx, 0, p+":*", 1000).Iterator()
			for iter.Next(ctx) {
				rdb.Del(ctx, iter.Val())
			}
			rdb.Close()
		}
	})
	return p
}

// Config is a configuration for the test environment with a fresh prefix
// and short timings, so redelivery tests do not wait 30 s.
func Config(t testing.TB) config.Config {
	t.Helper()
	cfg, err := config.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Prefix = Prefix(t)
	cfg.NATS.URL = NATSURL(t)
	cfg.Redis.URL = RedisURL(t)
	cfg.Stream.AckWait = 3 * time.Second
	cfg.Stream.DrainTimeout = 5 * time.Second
	cfg.LLM.Timeout = 20 * time.Second
	cfg.LLM.MaxRetries = 2
	return cfg
}
