// Package redisconn is the connection a config's [redis] table describes:
// the go-redis client (plain, Sentinel or Cluster), and how it is named in
// logs (without a password) and explained when it fails. config keeps the
// table as data; the binary and tickd.Open connect through this.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
)

// Client builds the go-redis client for the [redis] table r: go-redis's
// cluster client when ClusterAddrs is set; through Redis Sentinel when
// SentinelMaster is set (go-redis's failover client, which follows the
// primary across failovers); else to URL. The caller closes it.
//
// The client does not retry by itself (tickd retries a failed round with
// backoff: a blind retry of a script could apply it twice), and gives up on
// a connection after 2s.
func Client(r *config.Redis) (redis.UniversalClient, error) {
	ro, err := redis.ParseURL(r.URL)
	if err != nil {
		// The error text may quote the URL: never print it.
		return nil, fmt.Errorf("redis.url: cannot parse the URL")
	}
	const timeout = 2 * time.Second
	o := &redis.UniversalOptions{
		Username:              ro.Username,
		Password:              ro.Password,
		DB:                    ro.DB,
		TLSConfig:             ro.TLSConfig,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
	}
	switch {
	case len(r.ClusterAddrs) > 0:
		o.Addrs, o.IsClusterMode = r.ClusterAddrs, true
		co := o.Cluster()
		// The slot map is read again every second (one CLUSTER SLOTS): with
		// retries off, this is what finds a master promoted after a
		// failover (go-redis's default waits a minute).
		co.ClusterStateReloadInterval = time.Second
		return redis.NewClusterClient(co), nil
	case r.SentinelMaster != "":
		o.MasterName, o.Addrs = r.SentinelMaster, r.SentinelAddrs
		o.SentinelUsername, o.SentinelPassword = r.SentinelUsername, r.SentinelPassword
		return redis.NewFailoverClient(o.Failover()), nil
	}
	ro.ContextTimeoutEnabled = true
	ro.MaxRetries = -1
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = timeout, timeout, timeout
	return redis.NewClient(ro), nil
}

// TLS says whether the client speaks TLS to Redis (a rediss:// url).
func TLS(r *config.Redis) bool {
	ro, err := redis.ParseURL(r.URL)
	return err == nil && ro.TLSConfig != nil
}

// Explain adds to err, a failure to reach the table's Redis, what it most
// likely means: over TLS, a server that never answers the handshake is one
// that does not speak TLS (a rediss:// url to a plaintext port). Other
// errors are returned as they are.
func Explain(r *config.Redis, err error) error {
	var ne net.Error
	timeout := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	if err == nil || !timeout || !TLS(r) {
		return err
	}
	return fmt.Errorf("%w: the url is rediss:// (TLS), and the server never answered the TLS handshake: this looks like TLS to a Redis that does not speak it (a plaintext port? then redis://)", err)
}

// Where says which Redis the table names, for logs: the URL without its
// password, or the sentinels and the master's name.
func Where(r *config.Redis) string {
	if len(r.ClusterAddrs) > 0 {
		return fmt.Sprintf("cluster via %v", r.ClusterAddrs)
	}
	if r.SentinelMaster != "" {
		return fmt.Sprintf("sentinel master %q via %v", r.SentinelMaster, r.SentinelAddrs)
	}
	return redactURL(r.URL)
}

// redactURL drops any password from a Redis URL, for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	// The whole user part: a URL written redis://PASSWORD@host has its
	// password where the user goes. And every query value (?password=).
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	if q := u.Query(); len(q) > 0 {
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// InsecureTLS says whether the url turns TLS's certificate check off
// (rediss://…?skip_verify=true): anyone on the path can pose as Redis.
func InsecureTLS(r *config.Redis) bool {
	ro, err := redis.ParseURL(r.URL)
	return err == nil && ro.TLSConfig != nil && ro.TLSConfig.InsecureSkipVerify
}
