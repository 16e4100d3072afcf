//go:build linux && cgo

package sigstate

/*
#include <signal.h>
#include <stdint.h>

// Read by a constructor: it runs before main, which is where the Go
// runtime starts (and installs its handlers) in a program linked with
// cgo. Written once, read only afterwards.
static uint64_t vramprof_sigstate_ignored, vramprof_sigstate_blocked;
static int vramprof_sigstate_read;

__attribute__((constructor)) static void vramprof_sigstate_init(void)
{
	sigset_t mask;
	int s;

	for (s = 1; s <= 64; s++) {
		struct sigaction sa;
		// glibc refuses its own signals (32, 33): the runtime leaves
		// those as they were anyway.
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
			vramprof_sigstate_ignored |= 1ULL << (s - 1);
	}
	if (sigprocmask(SIG_SETMASK, NULL, &mask) == 0) {
		for (s = 1; s <= 64; s++)
			if (sigismember(&mask, s) == 1)
				vramprof_sigstate_blocked |= 1ULL << (s - 1);
	}
	vramprof_sigstate_read = 1;
}

static uint64_t vramprof_sigstate_get_ignored(void) { return vramprof_sigstate_ignored; }
static uint64_t vramprof_sigstate_get_blocked(void) { return vramprof_sigstate_blocked; }
static int vramprof_sigstate_get_read(void) { return vramprof_sigstate_read; }
*/
import "C"

// startState returns what the constructor read.
func startState() (ignored, blocked uint64, known bool) {
	return uint64(C.vramprof_sigstate_get_ignored()), uint64(C.vramprof_sigstate_get_blocked()), C.vramprof_sigstate_get_read() != 0
}
