// Package sigstate keeps the signal dispositions and mask this process was
// started with, so that a command it launches gets them unchanged.
//
// The Go runtime installs a handler for almost every signal before any Go
// code runs, even one its parent had set to SIG_IGN (it keeps only an
// ignored SIGHUP and SIGINT), and exec(2) resets a handled signal to its
// default while it keeps an ignored one. So a command launched from Go would
// lose what its parent ignored: a shell's trap "" PIPE, nohup's SIGHUP, the
// SIGINT and SIGQUIT a shell ignores for a background job. The kernel keeps
// no record of what the dispositions were, so they are read before the
// runtime starts: by a C constructor (cgo), which runs before Go's own
// start-up. Built without cgo, only SIGHUP and SIGINT are known (Known
// reports false).
//
// Keep makes this process ignore again what it started with ignored, as a C
// program would (it neither dies of them nor sees them); ForExec extends
// that, around a fork, to the signals the runtime must keep handling
// (SIGCHLD, SIGURG), so that the child starts with exactly the inherited
// set, and sets the forking thread's mask to the one this process started
// with (Blocked), which the child inherits.
//
// The signals a Go program cannot ignore at all (SIGPROF, which the
// runtime keeps for profiling, and the synchronous ones it must catch:
// SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSTKFLT, SIGSYS) reach a child
// with their default action even when inherited as ignored; Lost lists
// them.
//
// Imports, besides the standard library: golang.org/x/sys and cgo.
package sigstate
