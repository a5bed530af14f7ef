// Package config is tickd's configuration: the TOML file's tables
// ([daemon], [redis], [web], [defaults], [[tasks]]), their decoding and
// validation (every mistake at once, by file, line and key), the schedules
// a task is written with (every, cron, in a time zone), the task registry's
// form of a task, and the Redis client and lease store a config asks for.
//
// It does not run anything: package scheduler runs the ticks of a Config,
// package history reads what they left.
package config
