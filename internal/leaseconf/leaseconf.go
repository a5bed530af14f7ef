// Package leaseconf says a config's tasks and limits in the words of the
// lease store's driver: what config declares, as the store enforces and
// keeps it. It is config's side of the driver contract, kept out of
// config, whose API is stable while the contract is not yet.
package leaseconf

import (
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/lease/driver"
)

// Limit is l as the store enforces it.
func Limit(l *config.Limit) driver.Limit {
	d := driver.Limit{Name: l.Name, Concurrency: l.Concurrency, Rate: l.RateN, Per: l.RatePer, Burst: l.Burst, PerEntity: l.Per == "entity", Fair: l.FairBy != ""}
	if l.Rate == config.RateAuto {
		d.Auto, d.AutoStart = true, AutoStart
		if l.RateMaxN > 0 {
			d.AutoMax = float64(l.RateMaxN) / l.RateMaxPer.Seconds()
			d.AutoStart = min(d.AutoStart, d.AutoMax)
		}
	}
	return d
}

// AutoStart is a rate = "auto" limit's rate before any answer said one,
// starts a second: low, so that the first answers teach it before it can
// exceed the API's.
const AutoStart = 1.0

// Limits are c's limits as the store enforces them (Store.SetLimits).
func Limits(c *config.Config) []driver.Limit {
	out := make([]driver.Limit, len(c.Limits))
	for i := range c.Limits {
		out[i] = Limit(&c.Limits[i])
	}
	return out
}

// TaskInfo is what the task registry keeps of t (Store.RegisterTasks).
func TaskInfo(t *config.Task) driver.TaskInfo {
	return driver.TaskInfo{Name: t.Name, Schedule: t.ScheduleText(), Timezone: t.Location.String()}
}

// Retention is how much of t's history the store keeps.
func Retention(t *config.Task) driver.Retention {
	return driver.Retention{Ticks: t.HistoryTicks, Age: t.HistoryAge, Failures: t.FailuresKept, Actions: driver.DefaultHistory().Actions}
}
