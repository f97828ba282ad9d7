package store_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ralphmesh/ralph/pkg/store"
)

// go-redis's own log lines go through zap once LogRedisTo has run, not to
// stderr beside it.
func TestLogRedisTo(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	store.LogRedisTo(zap.New(core))
	t.Cleanup(func() { store.LogRedisTo(zap.NewNop()) })

	// go-redis warns about, and clamps, a read buffer too small for RESP3
	// when the client is built; no server is needed.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Protocol: 3, ReadBufferSize: 16})
	defer rdb.Close()

	entries := logs.FilterMessageSnippet("ReadBufferSize=16 is below the RESP3 minimum").All()
	if len(entries) != 1 {
		t.Fatalf("zap got %d matching lines, want 1; all: %+v", len(entries), logs.All())
	}
	e := entries[0]
	if e.Level != zap.WarnLevel || e.ContextMap()["component"] != "go-redis" {
		t.Fatalf("entry %+v: want a warning with component=go-redis", e)
	}
	if strings.HasPrefix(e.Message, "redis") {
		t.Fatalf("message %q keeps go-redis's own prefix", e.Message)
	}
}
