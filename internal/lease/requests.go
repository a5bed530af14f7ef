package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/tickd/tickd/lease/driver"
)

// A request id follows one trigger (tickd trigger -wait) through whatever
// runs it causes: the due entry it joins, the follow-up it becomes when the
// entity is busy, the run that carries it out and the one a hand-over
// passes it to. Each run answers the ids it carried, at release, with its
// outcome; a trigger that causes no run is answered AnswerSkipped or
// AnswerDropped. Answers are kept per request and entity (Answers) for
// driver.RequestTTL after the last one.

// NewRequestID returns a fresh request id.
func NewRequestID() string {
	var b [8]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail
	return hex.EncodeToString(b[:])
}

// validRequestID: ids end up in keys and in comma-joined lists.
func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func checkRequestIDs(ids []string) error {
	for _, id := range ids {
		if !validRequestID(id) {
			return fmt.Errorf("lease: request id %q: use a-z, 0-9 and - only", id)
		}
	}
	return nil
}

// Answers reads the answers to request id of task so far, by entity.
func (s *Store) Answers(ctx context.Context, task, id string) (map[string]driver.Outcome, error) {
	if err := checkRequestIDs([]string{id}); err != nil {
		return nil, err
	}
	m, err := s.shards.mergeAnswers(ctx, task, id)
	if err != nil {
		return nil, fmt.Errorf("read answers to request %s: %w", id, err)
	}
	return m, nil
}

// Forget deletes the answers to request id of task.
func (s *Store) Forget(ctx context.Context, task, id string) error {
	return s.shards.eachShard(ctx, task, func(name string) error { return s.b.Forget(ctx, name, id) })
}
