package lease

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Budgets are a store's hand on its limits' shared budgets: closing them
// and telling them the rate their API said (Store.Budgets).
type Budgets struct{ s *Store }

// Budgets is the store's hand on its limits' budgets.
func (s *Store) Budgets() Budgets { return Budgets{s} }

// Close closes a budget of lim for d: entity's own for a limit per
// entity, else the limit's one. No run starts under it until then, on any
// replica; why says what closed it (an API's 429).
func (b Budgets) Close(ctx context.Context, lim driver.Limit, entity string, d time.Duration, why string) error {
	if err := b.s.b.CloseLimit(ctx, lim, budgetKey(lim, entity), d, boundedReason(why)); err != nil {
		return fmt.Errorf("close limit %s: %w", lim.Name, err)
	}
	return nil
}

// Learn tells an auto limit what an answer of entity's run said of its
// rate: its one budget's, or entity's own for a limit per entity.
func (b Budgets) Learn(ctx context.Context, lim driver.Limit, entity string, seen driver.RateSeen) error {
	seen.Source = boundedReason(seen.Source)
	if err := b.s.b.LearnRate(ctx, lim, budgetKey(lim, entity), seen); err != nil {
		return fmt.Errorf("learn rate of limit %s: %w", lim.Name, err)
	}
	return nil
}

// MaxCloseReason bounds the reason a closed budget keeps, and what a
// learned rate says it came from, in bytes.
const MaxCloseReason = 256

// boundedReason is why cut to MaxCloseReason bytes: every replica's status
// reads it.
func boundedReason(why string) string {
	if len(why) > MaxCloseReason {
		why = strings.ToValidUTF8(why[:MaxCloseReason], "")
	}
	return why
}
