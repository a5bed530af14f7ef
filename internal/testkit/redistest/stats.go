package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"

	"github.com/redis/go-redis/v9"
)

// CommandCalls is how many times the server c talks to ran cmd (lower
// case), from INFO commandstats; 0 if it never did.
func CommandCalls(t testing.TB, c *redis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, err := strconv.Atoi(v)
			if err != nil {
				expect.Fatalf(t, "INFO commandstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
