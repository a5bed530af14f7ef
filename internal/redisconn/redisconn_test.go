package redisconn

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestRedisURLNeverShowsASecret: what tickd prints of a Redis URL (the
// start line, check, errors) holds no password: not in the password's
// place, not where a user goes (redis://PASSWORD@host), not in the query.
func TestRedisURLNeverShowsASecret(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://s3cret@127.0.0.1:6379/0":                      "redis://xxxxx@127.0.0.1:6379/0",
		"redis://app:s3cret@127.0.0.1:6379/0":                  "redis://xxxxx@127.0.0.1:6379/0",
		"rediss://127.0.0.1:6380/0?password=s3cret&protocol=3": "rediss://127.0.0.1:6380/0?password=xxxxx&protocol=xxxxx",
		"redis://127.0.0.1:6379/0":                             "redis://127.0.0.1:6379/0",
	} {
		got := Where(&config.Redis{URL: raw})
		expect.Equal(t, raw, got, want)
	}
	expect.True(t, "skip_verify is said", InsecureTLS(&config.Redis{URL: "rediss://h:6380?skip_verify=true"}))
	expect.True(t, "a verified TLS is not", !InsecureTLS(&config.Redis{URL: "rediss://h:6380"}))
}

// A [redis] table is named in logs by what it connects through: the
// sentinels and the master's name, or the cluster's seed nodes; with
// cluster_addrs, the client is a cluster client (url gives only the
// credentials).
func TestSentinelAndClusterAreNamed(t *testing.T) {
	expect.Equal(t, "sentinel", Where(&config.Redis{SentinelMaster: "m", SentinelAddrs: []string{"127.0.0.1:26379"}}), `sentinel master "m" via [127.0.0.1:26379]`)
	r := &config.Redis{URL: "redis://:pw@x:1/0", ClusterAddrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}}
	expect.Equal(t, "cluster", Where(r), "cluster via [127.0.0.1:7000 127.0.0.1:7001]")
	c, err := Client(r)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("client %T, want a cluster client", c)
	}
}
