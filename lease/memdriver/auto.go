package memdriver

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// autoRate is a budget's learned rate: learn.lua's base:auto:KEY.
type autoRate struct {
	rate, knee    float64
	at, cut, said time.Time
	src           string
}

// interval is the time between two starts of key's budget under lim: its
// rate's, or the one learned for it (limit.lua's ival_of).
func (l *memLimit) interval(lim driver.Limit, key string) time.Duration {
	if !lim.Auto {
		return lim.Interval()
	}
	r := lim.AutoStart
	if a := l.auto[key]; a != nil {
		r = a.rate
	}
	return time.Duration(math.Floor(1e6/math.Max(r, driver.AutoFloor))) * time.Microsecond
}

// LearnRate is learn.lua's twin.
func (b *memDriver) LearnRate(_ context.Context, lim driver.Limit, key string, seen driver.RateSeen) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().Truncate(time.Millisecond)
	l := b.limit(lim.Name, now)
	if l.auto == nil {
		l.auto = map[string]*autoRate{}
	}
	a := l.auto[key]
	if a == nil {
		a = &autoRate{rate: lim.AutoStart}
	}
	switch {
	case seen.Rate > 0:
		a.rate, a.said, a.src = seen.Rate*driver.AutoMargin, now, seen.Source
	case seen.TooMany && now.Sub(a.cut) < driver.AutoHold:
		return nil
	case seen.TooMany:
		by := driver.AutoDecrease
		if now.Sub(a.cut) < 4*driver.AutoHold {
			by = driver.AutoDecreaseAgain
		}
		a.knee, a.rate, a.cut, a.src = a.rate, a.rate*by, now, "429s"
	case now.Sub(a.said) >= driver.AutoSaidFor && now.Sub(a.at) >= 2*driver.AutoHold && now.Sub(a.cut) >= 2*driver.AutoHold &&
		now.Sub(l.bound[key]) <= 2*driver.AutoHold:
		a.src = "answers since a 429"
		switch {
		case a.knee == 0:
			a.rate, a.src = a.rate*2, "answers without a 429"
		case a.rate < a.knee*driver.AutoMargin*(1-driver.AutoProbe):
			a.rate += (a.knee*driver.AutoMargin - a.rate) * driver.AutoRecover
		default:
			a.rate = math.Max(a.rate, a.knee*driver.AutoMargin) + a.knee*driver.AutoProbe
		}
	default:
		return nil
	}
	if lim.AutoMax > 0 {
		a.rate = math.Min(a.rate, lim.AutoMax)
	}
	a.rate = math.Max(a.rate, driver.AutoFloor)
	// As the script keeps it: 14 digits.
	a.rate, _ = strconv.ParseFloat(strconv.FormatFloat(a.rate, 'g', 14, 64), 64)
	a.at = now
	l.auto[key] = a
	return nil
}

// autoWait is how long until an auto limit's run at rank may start
// (limit.lua's auto_wait), marking the budget bound by its rate when the
// run is near the head and starts went at the rate (used).
func (l *memLimit) autoWait(key string, rank, burst int, ival time.Duration, now time.Time, used bool) time.Duration {
	if rank <= 2*max(burst, 1) && used {
		l.bound[key] = now.Truncate(time.Millisecond)
	}
	a := l.auto[key]
	switch {
	case a != nil && now.Sub(a.said) < driver.AutoSaidFor:
		return time.Duration(rank) * ival
	case a == nil || a.knee == 0:
		return time.Duration(math.Log2(1+float64(rank)*math.Ln2*ival.Seconds())*1e6) * time.Microsecond
	}
	return (time.Duration(rank) * ival / time.Microsecond / driver.AutoAhead) * time.Microsecond
}
