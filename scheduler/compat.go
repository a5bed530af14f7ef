package scheduler

import (
	"context"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/history"
	"github.com/tickd/tickd/lease"
)

// The names below moved to packages config and history; they stay here
// for a release so that programs embedding tickd keep compiling.

// Config moved to package config.
//
// Deprecated: use config.Config.
type Config = config.Config

// Daemon moved to package config.
//
// Deprecated: use config.Daemon.
type Daemon = config.Daemon

// Redis moved to package config.
//
// Deprecated: use config.Redis.
type Redis = config.Redis

// Web moved to package config.
//
// Deprecated: use config.Web.
type Web = config.Web

// Task moved to package config.
//
// Deprecated: use config.Task.
type Task = config.Task

// OnBusy moved to package config.
//
// Deprecated: use config.OnBusy.
type OnBusy = config.OnBusy

// Deprecated: use config.OnBusySkip and config.OnBusyQueue.
const (
	OnBusySkip  = config.OnBusySkip
	OnBusyQueue = config.OnBusyQueue
)

// ConfigError moved to package config.
//
// Deprecated: use config.Error.
type ConfigError = config.Error

// Schedule moved to package config.
//
// Deprecated: use config.Schedule.
type Schedule = config.Schedule

// Every moved to package config.
//
// Deprecated: use config.Every.
type Every = config.Every

// Cron moved to package config.
//
// Deprecated: use config.Cron.
type Cron = config.Cron

// Orphan moved to package config.
//
// Deprecated: use config.Orphan.
type Orphan = config.Orphan

// LoadConfig moved to package config.
//
// Deprecated: use config.Load.
func LoadConfig(path string) (*Config, error) { return config.Load(path) }

// LoadConnection moved to package config.
//
// Deprecated: use config.LoadConnection.
func LoadConnection(path string) (*Config, error) { return config.LoadConnection(path) }

// ParseConfig moved to package config.
//
// Deprecated: use config.Parse.
func ParseConfig(path string, data []byte) (*Config, error) { return config.Parse(path, data) }

// NewConfig moved to package config.
//
// Deprecated: use config.New.
func NewConfig(daemon Daemon, r *Redis, tasks ...Task) (*Config, error) {
	return config.New(daemon, r, tasks...)
}

// DefaultDaemon moved to package config.
//
// Deprecated: use config.DefaultDaemon.
func DefaultDaemon() Daemon { return config.DefaultDaemon() }

// DefaultRedis moved to package config.
//
// Deprecated: use config.DefaultRedis.
func DefaultRedis() Redis { return config.DefaultRedis() }

// DefaultTask moved to package config.
//
// Deprecated: use config.DefaultTask.
func DefaultTask() Task { return config.DefaultTask() }

// ParseCron moved to package config.
//
// Deprecated: use config.ParseCron.
func ParseCron(spec string, loc *time.Location) (Cron, error) { return config.ParseCron(spec, loc) }

// Prev moved to package config.
//
// Deprecated: use config.Prev.
func Prev(s Schedule, t time.Time, within time.Duration) time.Time { return config.Prev(s, t, within) }

// DSTNote moved to package config.
//
// Deprecated: use config.DSTNote.
func DSTNote(s Schedule, at time.Time) string { return config.DSTNote(s, at) }

// SpreadOffset moved to package config.
//
// Deprecated: use config.SpreadOffset.
func SpreadOffset(task, entity string, spread time.Duration) time.Duration {
	return config.SpreadOffset(task, entity, spread)
}

// Keys moved to package config.
//
// Deprecated: use config.Keys.
func Keys[T any]() []string { return config.Keys[T]() }

// Loopback moved to package config.
//
// Deprecated: use config.Loopback.
func Loopback(addr string) bool { return config.Loopback(addr) }

// CheckBasePath moved to package config.
//
// Deprecated: use config.CheckBasePath.
func CheckBasePath(p string) error { return config.CheckBasePath(p) }

// ShortDuration moved to package config.
//
// Deprecated: use config.ShortDuration.
func ShortDuration(d time.Duration) string { return config.ShortDuration(d) }

// RegisteredTask moved to package config.
//
// Deprecated: use config.RegisteredTask.
func RegisteredTask(ti lease.TaskInfo) (Task, error) { return config.RegisteredTask(ti) }

// Orphans moved to package config.
//
// Deprecated: use config.Orphans.
func Orphans(cfg *Config, reg []lease.TaskInfo) []Orphan { return config.Orphans(cfg, reg) }

// RunnerIDs moved to package config.
//
// Deprecated: use config.RunnerIDs.
func RunnerIDs(rs []lease.Replica, task string) []string { return config.RunnerIDs(rs, task) }

// TickView moved to package history.
//
// Deprecated: use history.TickView.
type TickView = history.TickView

// Health moved to package history.
//
// Deprecated: use history.Health.
type Health = history.Health

// Past moved to package history.
//
// Deprecated: use history.Past.
type Past = history.Past

// Deprecated: use the history package's constants.
const (
	TickComplete   = history.TickComplete
	TickRunning    = history.TickRunning
	TickIncomplete = history.TickIncomplete
	TickMissed     = history.TickMissed
	TickPaused     = history.TickPaused
)

// RecentActions moved to package history.
//
// Deprecated: use history.RecentActions.
const RecentActions = history.RecentActions

// ReadPast moved to package history.
//
// Deprecated: use history.ReadPast.
func ReadPast(ctx context.Context, store *lease.Store, t *Task, limit int) (Past, error) {
	return history.ReadPast(ctx, store, t, limit)
}

// ReadPasts moved to package history.
//
// Deprecated: use history.ReadPasts.
func ReadPasts(ctx context.Context, store *lease.Store, ts []*Task, ticks, actions int, pauses map[string]lease.PauseInfo, replicas []lease.Replica) ([]Past, error) {
	return history.ReadPasts(ctx, store, ts, ticks, actions, pauses, replicas)
}
