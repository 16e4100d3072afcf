//go:build !linux || !cgo

package sigstate

import (
	"os/signal"
	"syscall"
)

// startState returns what the runtime itself kept: an ignored SIGHUP and
// SIGINT stay ignored (os/signal.Ignored tells); the rest is unknown.
func startState() (ignored, blocked uint64, known bool) {
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(s) {
			ignored |= bit(s)
		}
	}
	return ignored, 0, false
}
