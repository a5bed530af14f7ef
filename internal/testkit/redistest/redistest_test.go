package redistest

import (
	"net"
	"testing"
)

// TestStartPicksAgainWhenThePortIsTaken: a port another process took
// between its pick and redis-server's bind is picked again, not a failed
// test (CI saw one for a Cluster node).
func TestStartPicksAgainWhenThePortIsTaken(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	first := true
	pick := func(t testing.TB) int {
		if first {
			first = false
			return taken.Addr().(*net.TCPAddr).Port
		}
		return FreePort(t)
	}
	s := &Server{t: t, Dir: t.TempDir()}
	s.startOnNewPort(pick)
	t.Cleanup(s.Stop)
	if s.port == taken.Addr().(*net.TCPAddr).Port {
		t.Fatalf("started on the taken port %d", s.port)
	}
	if err := ping(s.Addr); err != nil {
		t.Fatalf("redis-server on %s: %v", s.Addr, err)
	}
}

// TestStartIsNotTakenInByAnotherRedis: a port another test's redis-server
// took between the pick and this one's bind is picked again too, though
// that server answers PING there: before, the start took its PONG for this
// one's, and a Cluster node "started" on a plain server's port (CI:
// "Node … is not configured as a cluster node").
func TestStartIsNotTakenInByAnotherRedis(t *testing.T) {
	t.Parallel()
	other := Start(t)
	first := true
	pick := func(t testing.TB) int {
		if first {
			first = false
			return other.port
		}
		return FreePort(t)
	}
	s := &Server{t: t, Dir: t.TempDir()}
	s.startOnNewPort(pick)
	t.Cleanup(s.Stop)
	if s.port == other.port {
		t.Fatalf("started on the other server's port %d", s.port)
	}
	if err := s.answersAsItself(); err != nil {
		t.Fatal(err)
	}
}
