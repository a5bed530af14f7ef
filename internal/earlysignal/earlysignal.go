// Package earlysignal takes SIGTERM, SIGINT and SIGHUP for tickd from the
// first moment its own code runs: this package's init, which depends on
// os/signal alone and so runs before most of the binary's packages are
// initialized. A signal that comes while the rest of the program starts
// (a rolling restart right after a start) waits in C for the command that
// handles signals, instead of killing the process with the signal's default
// action (exit status 143).
package earlysignal

import (
	"os"
	"os/signal"
	"syscall"
)

// c holds the signals that came since the process started, until a command
// takes them over (Hand) or gives them their default action (Default).
var c = make(chan os.Signal, 8)

func init() { signal.Notify(c, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP) }

// Hand sends the signals sigs on to ch from now on, with those that came
// before (a command that handles signals: tickd run, lock, web). The caller
// stops ch with signal.Stop when it is done.
func Hand(ch chan<- os.Signal, sigs ...os.Signal) {
	signal.Notify(ch, sigs...)
	signal.Stop(c)
	for {
		select {
		case s := <-c:
			for _, want := range sigs {
				if s == want {
					select {
					case ch <- s:
					default:
					}
				}
			}
		default:
			return
		}
	}
}

// Default gives the signals back their default action, for a command that
// does not handle them: one that came already is acted on at once.
func Default() {
	signal.Stop(c)
	for {
		select {
		case s := <-c:
			if s, ok := s.(syscall.Signal); ok && s != syscall.SIGHUP {
				os.Exit(128 + int(s))
			}
		default:
			return
		}
	}
}
