package fence

import (
	"context"
	_ "embed" // the guard's script
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisScript is the Redis guard, a Lua script for EVAL (the file
// guard.lua beside this package, installed by tickd's packages as
// /usr/share/tickd/fence-guard.lua):
//
//	KEYS[1]  the fence's key; KEYS[2] the key the write touches
//	ARGV[1]  the run's fence; ARGV[2…] the write's command and its
//	         arguments after its key (KEYS[2])
//
// It runs the write only if the fence is at least the highest that wrote
// under KEYS[1] (and makes it the highest); a stale fence is the error
// reply "STALE …" and nothing is written. In an exec run:
//
//	redis-cli -e --eval /usr/share/tickd/fence-guard.lua \
//	    "{$TICKD_TASK/$TICKD_ENTITY}:fence" "{$TICKD_TASK/$TICKD_ENTITY}:out" , \
//	    "$TICKD_FENCE" SET "$RESULT"
//
// On a Redis Cluster both keys must share a slot: one hash tag, as above.
//
//go:embed guard.lua
var RedisScript string

var guard = redis.NewScript(RedisScript)

// Redis runs the write cmd (a command and its arguments after its key) on
// key, only if fence is at least the highest that wrote under fenceKey,
// which it then holds; with no cmd, it advances fenceKey alone. It returns
// the command's reply, or a *StaleError (ErrStale) and writes nothing.
//
//	reply, err := fence.Redis(ctx, rdb, "sync/shop-7:fence", run.Fence, "sync/shop-7:total", "SET", total)
func Redis(ctx context.Context, c redis.Scripter, fenceKey string, fence int64, key string, cmd ...any) (any, error) {
	if fence < 1 {
		return nil, fmt.Errorf("fence: %d is not a fence (at least 1)", fence)
	}
	keys := []string{fenceKey}
	if len(cmd) > 0 {
		keys = append(keys, key)
	}
	reply, err := guard.Run(ctx, c, keys, append([]any{fence}, cmd...)...).Result()
	if msg, ok := strings.CutPrefix(errorText(err), "STALE "); ok {
		stale := &StaleError{Key: fenceKey, Fence: fence}
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			stale.Highest, _ = strconv.ParseInt(strings.TrimSuffix(msg[i+2:], " wrote"), 10, 64)
		}
		return nil, stale
	}
	if err != nil {
		return nil, fmt.Errorf("fence: redis guard for %q: %w", fenceKey, err)
	}
	return reply, nil
}

// errorText is a Redis error reply's text, or "".
func errorText(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return rerr.Error()
	}
	return ""
}
