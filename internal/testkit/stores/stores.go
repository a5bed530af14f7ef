// Package stores opens the lease stores tests use, as tickd.Open does:
// the driver built first and handed to lease.New (lease imports no
// driver).
package stores

import (
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/memdriver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// Redis is a store over Redis under prefix, acknowledged by acks (AcksAuto
// unless given).
func Redis(c redisdriver.RedisClient, prefix string, opts lease.Options, acks ...driver.ReplicaAcks) (*lease.Store, error) {
	a := driver.AcksAuto
	if len(acks) > 0 {
		a = acks[0]
	}
	d, err := redisdriver.New(c, prefix, a)
	if err != nil {
		return nil, err
	}
	return lease.New(d, opts), nil
}

// Memory is a store in this process.
func Memory(opts lease.Options) *lease.Store { return lease.New(memdriver.New(), opts) }
