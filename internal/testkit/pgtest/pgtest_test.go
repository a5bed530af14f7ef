package pgtest

import (
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestStartTwo: two servers at once, each its own, both answering SQL.
func TestStartTwo(t *testing.T) {
	t.Parallel()
	a, b := Start(t), Start(t)
	a.Exec(t, "CREATE TABLE x (v int); INSERT INTO x VALUES (1)")
	expect.Equal(t, "a's row", a.Exec(t, "SELECT v FROM x"), "1")
	expect.Equal(t, "b has no table x", b.Exec(t, "SELECT count(*) FROM pg_tables WHERE tablename = 'x'"), "0")
}
