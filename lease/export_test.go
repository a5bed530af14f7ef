package lease

import "testing"

// stopRenewing makes the keeper leave l alone, so that it expires: the
// store forgets it holds l (its trust window still ends, and cancels it).
func (l *Lease) stopRenewing() {
	l.store.mu.Lock()
	delete(l.store.held, l)
	l.store.mu.Unlock()
}

// The kits of the internal tests, for lease_test's TestConformance (which
// is external: lease/drivertest imports lease).

// RedisKitWith makes stores on the clients newClient makes, one each,
// under a key prefix of its own.
func RedisKitWith(t *testing.T, newClient func() RedisClient) func(Options) *Store {
	return redisKitWith(t, newClient).client
}

// MemoryKit makes one in-process store, the same for every call.
func MemoryKit(t *testing.T) func(Options) *Store { return memoryKit(t).client }
