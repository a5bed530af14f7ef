package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/logs"
)

// redisLog routes go-redis's own log lines (a pool that cannot dial, …)
// into tickd's log, rate-limited like tickd's own lines about Redis: left
// to itself, go-redis prints "redis: 2026/…" lines to stderr several times
// a second, breaking the JSON stream.
type redisLog struct {
	log   *slog.Logger
	limit *logs.Limiter
}

func (r redisLog) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	switch {
	case strings.HasPrefix(msg, "sentinel: selected addr"), strings.HasPrefix(msg, "sentinel: discovered new sentinel"),
		strings.HasPrefix(msg, "sentinel: ignore addr"):
		r.log.Debug("redis client: " + msg) // Sentinel discovery at work, not a problem
	case strings.HasPrefix(msg, "sentinel: new master"):
		r.log.Info("redis client: " + msg) // a failover, followed
	default:
		r.limit.Log(r.log, slog.LevelWarn, "go-redis", "redis client: "+msg)
	}
}

// RouteLogs sends go-redis's log lines to log. go-redis has one logger per
// process: the last call wins, and an embedding program's own go-redis
// clients write there too.
func RouteLogs(log *slog.Logger) {
	redis.SetLogger(redisLog{log: log, limit: logs.NewLimiter(logs.Every)})
}
