package drivertest

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// calls records which of a driver's methods the suite's cases called:
// Run fails for a method of driver.Driver (or of driver.Admin, for a
// driver that offers it) that no case called, so that every method a
// driver writes is held to a promise by some case.
type calls struct {
	mu     sync.Mutex
	called map[string]bool
	admin  bool // a driver offered driver.Admin
}

func (c *calls) call(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.called == nil {
		c.called = map[string]bool{}
	}
	c.called[name] = true
}

// uncalled are the methods of iface no case called.
func (c *calls) uncalled(iface reflect.Type) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i := range iface.NumMethod() {
		if name := iface.Method(i).Name; !c.called[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// check fails t for the methods no case called: of driver.Driver, and of
// driver.Admin when the drivers offered it.
func (c *calls) check(t *testing.T) {
	t.Helper()
	if m := c.uncalled(reflect.TypeFor[driver.Driver]()); len(m) > 0 {
		t.Errorf("no case called these methods of the driver: %v", m)
	}
	if m := c.uncalled(reflect.TypeFor[driver.Admin]()); c.admin && len(m) > 0 {
		t.Errorf("no case called these methods of the driver's Admin: %v", m)
	}
}

// recorded is d, each of its calls recorded in c; a driver with Admin
// stays one.
func recorded(d driver.Driver, c *calls) driver.Driver {
	r := recorder{d: d, r: c}
	if a, ok := d.(driver.Admin); ok {
		c.mu.Lock()
		c.admin = true
		c.mu.Unlock()
		return adminRecorder{r, a}
	}
	return r
}

// recorder passes each call on to d, recorded.
type recorder struct {
	d driver.Driver
	r *calls
}

// adminRecorder is a recorder of a driver that offers driver.Admin.
type adminRecorder struct {
	recorder
	a driver.Admin
}

// WatchRevocations passes on to a driver that watches (driver.RevocationWatcher).
func (x recorder) WatchRevocations(ctx context.Context, fn func(task, entity string, fence int64, how driver.Revocation)) bool {
	w, ok := x.d.(driver.RevocationWatcher)
	return ok && w.WatchRevocations(ctx, fn)
}

func (x recorder) Configure(cfg driver.Config) {
	x.r.call("Configure")
	x.d.Configure(cfg)
}

func (x recorder) Acquire(ctx context.Context, reqs []driver.AcquireArg) ([]driver.AcquireReply, error) {
	x.r.call("Acquire")
	return x.d.Acquire(ctx, reqs)
}

func (x recorder) Renew(ctx context.Context, ls []*driver.Lease) ([]driver.Renewal, error) {
	x.r.call("Renew")
	return x.d.Renew(ctx, ls)
}

func (x recorder) Release(ctx context.Context, rs []driver.ReleaseArg) ([]driver.ReleaseReply, error) {
	x.r.call("Release")
	return x.d.Release(ctx, rs)
}

func (x recorder) Unlock(ctx context.Context, task string, entity string, by string, force bool) (driver.Unlocked, bool, error) {
	x.r.call("Unlock")
	return x.d.Unlock(ctx, task, entity, by, force)
}

func (x recorder) Taken(ctx context.Context, task string, tick time.Time, chunks []string) ([]bool, error) {
	x.r.call("Taken")
	return x.d.Taken(ctx, task, tick, chunks)
}

func (x recorder) Enqueue(ctx context.Context, d driver.Due, delay time.Duration) (time.Time, error) {
	x.r.call("Enqueue")
	return x.d.Enqueue(ctx, d, delay)
}

func (x recorder) Take(ctx context.Context, limit int, visibility time.Duration, claimPrefix string) ([]driver.Due, error) {
	x.r.call("Take")
	return x.d.Take(ctx, limit, visibility, claimPrefix)
}

func (x recorder) Ack(ctx context.Context, d driver.Due) error {
	x.r.call("Ack")
	return x.d.Ack(ctx, d)
}

func (x recorder) Answers(ctx context.Context, task string, id string) (map[string]driver.Outcome, error) {
	x.r.call("Answers")
	return x.d.Answers(ctx, task, id)
}

func (x recorder) Forget(ctx context.Context, task string, id string) error {
	x.r.call("Forget")
	return x.d.Forget(ctx, task, id)
}

func (x recorder) Leases(ctx context.Context, task string, fn func(driver.Held) error) error {
	x.r.call("Leases")
	return x.d.Leases(ctx, task, fn)
}

func (x recorder) LastRuns(ctx context.Context, task string, fn func(driver.LastRun) error) error {
	x.r.call("LastRuns")
	return x.d.LastRuns(ctx, task, fn)
}

func (x recorder) DueEntries(ctx context.Context, task string, fn func(driver.Due) error) error {
	x.r.call("DueEntries")
	return x.d.DueEntries(ctx, task, fn)
}

func (x recorder) DueCount(ctx context.Context) (int, error) {
	x.r.call("DueCount")
	return x.d.DueCount(ctx)
}

func (x recorder) EntityPage(ctx context.Context, task string, q driver.PageQuery) (driver.Page, error) {
	x.r.call("EntityPage")
	return x.d.EntityPage(ctx, task, q)
}

func (x recorder) One(ctx context.Context, task string, entity string) (driver.EntityState, error) {
	x.r.call("One")
	return x.d.One(ctx, task, entity)
}

func (x recorder) SetPaused(ctx context.Context, task string, p *driver.PauseInfo) error {
	x.r.call("SetPaused")
	return x.d.SetPaused(ctx, task, p)
}

func (x recorder) Paused(ctx context.Context) (map[string]driver.PauseInfo, error) {
	x.r.call("Paused")
	return x.d.Paused(ctx)
}

func (x recorder) EndPause(ctx context.Context, task string, p driver.PauseInfo) error {
	x.r.call("EndPause")
	return x.d.EndPause(ctx, task, p)
}

func (x recorder) RegisterTasks(ctx context.Context, ts []driver.TaskInfo) error {
	x.r.call("RegisterTasks")
	return x.d.RegisterTasks(ctx, ts)
}

func (x recorder) Registry(ctx context.Context) ([]driver.TaskInfo, error) {
	x.r.call("Registry")
	return x.d.Registry(ctx)
}

func (x recorder) ForgetTask(ctx context.Context, task string) (bool, error) {
	x.r.call("ForgetTask")
	return x.d.ForgetTask(ctx, task)
}

func (x recorder) Shards(ctx context.Context, want map[string]int) (map[string]int, error) {
	x.r.call("Shards")
	return x.d.Shards(ctx, want)
}

func (x recorder) RecordTicks(ctx context.Context, ws []driver.TickWrite) error {
	x.r.call("RecordTicks")
	return x.d.RecordTicks(ctx, ws)
}

func (x recorder) Ticks(ctx context.Context, task string, limit int) ([]driver.TickRecord, error) {
	x.r.call("Ticks")
	return x.d.Ticks(ctx, task, limit)
}

func (x recorder) Push(ctx context.Context, ps []driver.ListPush) error {
	x.r.call("Push")
	return x.d.Push(ctx, ps)
}

func (x recorder) Failures(ctx context.Context, task string, limit int) ([]driver.Failure, error) {
	x.r.call("Failures")
	return x.d.Failures(ctx, task, limit)
}

func (x recorder) Actions(ctx context.Context, task string, limit int) ([]driver.Action, error) {
	x.r.call("Actions")
	return x.d.Actions(ctx, task, limit)
}

func (x recorder) Histories(ctx context.Context, reads []driver.HistoryRead) ([][]driver.TickRecord, [][]driver.Action, error) {
	x.r.call("Histories")
	return x.d.Histories(ctx, reads)
}

func (x recorder) Announce(ctx context.Context, a driver.Announcement, ttl time.Duration) error {
	x.r.call("Announce")
	return x.d.Announce(ctx, a, ttl)
}

func (x recorder) Replicas(ctx context.Context) ([]driver.Replica, error) {
	x.r.call("Replicas")
	return x.d.Replicas(ctx)
}

func (x recorder) Known(ctx context.Context, task string) (bool, error) {
	x.r.call("Known")
	return x.d.Known(ctx, task)
}

func (x recorder) Ping(ctx context.Context) error {
	x.r.call("Ping")
	return x.d.Ping(ctx)
}

func (x recorder) Sweep(ctx context.Context) error {
	x.r.call("Sweep")
	return x.d.Sweep(ctx)
}

func (x recorder) Claim(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	x.r.call("Claim")
	return x.d.Claim(ctx, name, ttl)
}

func (x recorder) CheckEpochs(ctx context.Context) (time.Duration, error) {
	x.r.call("CheckEpochs")
	return x.d.CheckEpochs(ctx)
}

func (x recorder) TakeLimit(ctx context.Context, lim driver.Limit, ttl time.Duration, asks []driver.LimitAsk) ([]driver.LimitGrant, error) {
	x.r.call("TakeLimit")
	return x.d.TakeLimit(ctx, lim, ttl, asks)
}

func (x recorder) SetLimitRuns(ctx context.Context, lim driver.Limit, ttl time.Duration, runs map[string]int, giveBack []string) error {
	x.r.call("SetLimitRuns")
	return x.d.SetLimitRuns(ctx, lim, ttl, runs, giveBack)
}

func (x recorder) CloseLimit(ctx context.Context, lim driver.Limit, key string, d time.Duration, why string) error {
	x.r.call("CloseLimit")
	return x.d.CloseLimit(ctx, lim, key, d, why)
}

func (x recorder) LearnRate(ctx context.Context, lim driver.Limit, key string, seen driver.RateSeen) error {
	x.r.call("LearnRate")
	return x.d.LearnRate(ctx, lim, key, seen)
}

func (x recorder) LimitState(ctx context.Context, lim driver.Limit) (driver.LimitState, error) {
	x.r.call("LimitState")
	return x.d.LimitState(ctx, lim)
}

func (x adminRecorder) CheckLayout(ctx context.Context) error {
	x.r.call("CheckLayout")
	return x.a.CheckLayout(ctx)
}

func (x adminRecorder) Migrate(ctx context.Context) (driver.Migrated, error) {
	x.r.call("Migrate")
	return x.a.Migrate(ctx)
}

func (x adminRecorder) Reshard(ctx context.Context, task string, n int) (driver.Resharded, error) {
	x.r.call("Reshard")
	return x.a.Reshard(ctx, task, n)
}

func (x adminRecorder) Replication(ctx context.Context) (driver.Replication, error) {
	x.r.call("Replication")
	return x.a.Replication(ctx)
}

func (x adminRecorder) InitEpoch(ctx context.Context) error {
	x.r.call("InitEpoch")
	return x.a.InitEpoch(ctx)
}

func (x recorder) SaveBackfill(ctx context.Context, b driver.Backfill, hold time.Duration) (bool, error) {
	x.r.call("SaveBackfill")
	return x.d.SaveBackfill(ctx, b, hold)
}

func (x recorder) Backfills(ctx context.Context) ([]driver.Backfill, error) {
	x.r.call("Backfills")
	return x.d.Backfills(ctx)
}

func (x recorder) CancelBackfill(ctx context.Context, id, by string) (bool, error) {
	x.r.call("CancelBackfill")
	return x.d.CancelBackfill(ctx, id, by)
}

func (x recorder) RunRecord(ctx context.Context, task string, ticks []time.Time, entities []string) ([]driver.TickRan, error) {
	x.r.call("RunRecord")
	return x.d.RunRecord(ctx, task, ticks, entities)
}

func (x recorder) MarkFailed(ctx context.Context, task string, tick time.Time, entity string, failed bool, keep time.Duration) error {
	x.r.call("MarkFailed")
	return x.d.MarkFailed(ctx, task, tick, entity, failed, keep)
}
