//go:build !linux

package sigstate

import "syscall"

// unignorable is empty where nothing is launched.
var unignorable []syscall.Signal

// setThreadMask does nothing where nothing is launched.
func setThreadMask(Set) (restore func(), err error) { return func() {}, nil }
