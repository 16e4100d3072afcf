package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
)

// heapDebugEnv names a hidden debugging hook for vramprof's own memory:
// when set to a path prefix, each SIGUSR2 writes a heap profile of the
// vramprof process to PREFIX.N.pb.gz (N counting from 1), read with
// `go tool pprof`. It is how a soak's memory is broken down by structure
// (issue 12); unset, SIGUSR2 keeps its default action.
const heapDebugEnv = "VRAMPROF_DEBUG_HEAP"

func init() {
	prefix := os.Getenv(heapDebugEnv)
	if prefix == "" {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR2)
	go func() {
		for n := 1; ; n++ {
			<-sigs
			if err := writeHeapProfile(fmt.Sprintf("%s.%d.pb.gz", prefix, n)); err != nil {
				fmt.Fprintf(os.Stderr, "vramprof: %s: %v\n", heapDebugEnv, err)
			}
		}
	}()
}

// writeHeapProfile writes the heap profile after a collection, so that
// its in-use figures are the live heap now.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("write heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close heap profile: %w", err)
	}
	return nil
}
