// Package meshtest owns the test environment: a real NATS JetStream server
// (embedded from the nats-server module, or the external one named by
// RALPH_TEST_NATS_URL) and a real Redis (RALPH_TEST_REDIS_URL, default
// 127.0.0.1:6379; or a Redis Cluster or Sentinel started by RedisCluster and
// RedisSentinel), with a fresh subject prefix per test so tests never see
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

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/store"
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
// not reachable (scripts/test.sh starts one). Any URL store.ParseURL reads
// will do, a Redis Cluster's or Sentinel's too: the store's suite runs on
// each (pkg/store's TestSuiteOn*).
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("RALPH_TEST_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rdb, err := store.Connect(ctx, u)
	if err != nil {
		t.Fatalf("Redis at RALPH_TEST_REDIS_URL=%s is not reachable (%v); run the tests with `bash scripts/test.sh`, which starts one", settings.MaskURL(u), err)
	}
	_ = rdb.Close()
	return u
}

// Keys lists the keys matching pattern: SCAN on one server, on every master
// of a Redis Cluster (a cluster client's SCAN asks one node only).
func Keys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.UniversalClient) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var mu sync.Mutex
	var keys []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		k, err := scan(ctx, c)
		mu.Lock()
		keys = append(keys, k...)
		mu.Unlock()
		return err
	})
	return keys, err
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
				_ = js.DeleteStream(ctx, sessionindex.Stream(p))
			}
			nc.Close()
		}
		if rdb, err := store.Connect(ctx, redisURL); err == nil {
			keys, _ := Keys(ctx, rdb, p+":*")
			for _, k := range keys {
				rdb.Del(ctx, k)
			}
			_ = rdb.Close()
		}
	})
	return p
}
