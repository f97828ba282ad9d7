package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// LogRedisTo sends go-redis's own log lines (pool and reconnection trouble,
// option warnings) to log instead of go-redis's default, which writes them
// to stderr with its own format beside zap's. go-redis has one logger per
// process, so this is a process-wide setting: the last call wins.
func LogRedisTo(log *zap.Logger) {
	redis.SetLogger(redisLogger{log.WithOptions(zap.AddCallerSkip(2)).With(zap.String("component", "go-redis"))})
}

// redisLogger adapts zap to go-redis's Printf-style logging interface.
// go-redis logs only what goes wrong, and its lines carry no level, so they
// are warnings.
type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(strings.TrimSpace(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")))
}
