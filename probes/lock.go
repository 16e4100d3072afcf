//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// One session per process. Two sessions on one process would each stop it
// at every dlopen and resume it when done with their own scan (the first
// to finish lets it run on before the other has probed), share the
// allocator's USDT semaphores, and, started within the same second, write
// into one default output directory. So each traced process is locked by
// the session that traces it: an flock on LockDir/<pid>-<start time>.lock,
// the file holding the owner's PID. The kernel releases an flock when its
// holder dies, however it dies: a killed session leaves at most a file,
// never a lock.

// A session that traces every process (Options.All: attach --all, serve)
// takes no lock: a node's serve must not keep a user from attaching to one
// process for a closer look. It looks instead (heldBy, from /proc/locks,
// never by trying the lock, so its look cannot make another session's
// lockProc fail), leaves alone a process a single-process session holds,
// and lets go of one such a session starts tracing later (Session.tick).
// It never resumes a process such a session holds, not even one it
// stopped itself: that session stopped it at the same rendezvous and
// resumes it once it has probed (loaded.go).

// LockDir holds the per-process lock files. A variable for tests.
var LockDir = "/run/vramprof"

// procLock is a session's lock on one traced process.
type procLock struct {
	f    *os.File
	path string
}

// lockProc takes the lock on the process pid that started at start (clock
// ticks, procStartTime). It returns a *TracedError when another session
// holds it, and an error matching ErrLock when the lock cannot be taken at
// all (LockDir missing and not creatable, read-only, or a lock file that is
// a link or not a plain file): two sessions could then trace one process
// unawares, so tracing is refused rather than left unguarded.
//
// The file is opened in the directory opened (openat), never through a
// link (O_NOFOLLOW): a link planted at its name, or as the directory, is
// refused, its target untouched. O_NONBLOCK keeps a FIFO planted there
// from blocking the open; anything but a plain file with one link is
// refused before a byte of it is written.
func lockProc(pid uint32, start uint64) (*procLock, error) {
	if err := os.MkdirAll(LockDir, 0o755); err != nil {
		return nil, lockError(LockDir, err)
	}
	dir, err := unix.Open(LockDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, lockError(LockDir, err)
	}
	defer unix.Close(dir)
	name := fmt.Sprintf("%d-%d.lock", pid, start)
	path := filepath.Join(LockDir, name)
	for attempt := 0; attempt < 5; attempt++ {
		fd, err := unix.Openat(dir, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, lockError(path, err)
		}
		f := os.NewFile(uintptr(fd), path)
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			_ = f.Close()
			return nil, lockError(path, err)
		}
		if fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Nlink != 1 {
			_ = f.Close()
			return nil, lockError(path, fmt.Errorf("not a plain file of its own (mode %#o, %d links)", fst.Mode, fst.Nlink))
		}
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			owner := readOwner(f)
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, &TracedError{PID: pid, Owner: owner}
			}
			return nil, lockError(path, err)
		}
		// The holder before us removes the file as it lets go: if it did
		// between our open and our flock, we hold a lock on a file nobody
		// else can find. Try again with the one at the path now.
		var pst unix.Stat_t
		if unix.Fstatat(dir, name, &pst, unix.AT_SYMLINK_NOFOLLOW) != nil || fst.Ino != pst.Ino || fst.Dev != pst.Dev {
			_ = f.Close()
			continue
		}
		if err := f.Truncate(0); err != nil {
			_ = f.Close()
			return nil, lockError(path, err)
		}
		if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
			_ = f.Close()
			return nil, lockError(path, err)
		}
		return &procLock{f: f, path: path}, nil
	}
	return nil, lockError(path, errors.New("removed and made again by others five times in a row"))
}

// lockError is ErrLock for path, saying what to do in one line. Denied
// for want of privilege (not root), it matches ErrNotPermitted too: the
// fix is then to run as root, as for the probes.
func lockError(path string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		err = fmt.Errorf("%w (a symbolic link, or not a directory)", err)
	}
	if isPermission(err) {
		return fmt.Errorf("%w: %s: %w (%w)", ErrLock, path, err, ErrNotPermitted)
	}
	return fmt.Errorf("%w: %s: %w", ErrLock, path, err)
}

// heldBy returns the PID of the process holding the lock on pid (started at
// start), 0 when nobody holds it or it cannot be told. It reads /proc/locks,
// whose lines name each flock's holder and its file as major:minor:inode
// (hex device numbers), and so never takes the lock itself.
func heldBy(pid uint32, start uint64) int {
	var st syscall.Stat_t
	if syscall.Lstat(filepath.Join(LockDir, fmt.Sprintf("%d-%d.lock", pid, start)), &st) != nil {
		return 0
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for _, line := range strings.Split(string(data), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 2481 fe:00:745516 0 EOF"; a waiter's
		// line has "->" after the number.
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		if owner, err := strconv.Atoi(f[4]); err == nil {
			return owner
		}
	}
	return 0
}

// HeldBy returns the PID of the vramprof session that traces the process
// pid started at start (clock ticks since boot, /proc/PID/stat field 22),
// 0 when none does. It only looks (/proc/locks): it never takes the lock,
// so a session locking the process meanwhile is not disturbed. serve asks
// it of the processes it holds: one another session took is left to it.
func HeldBy(pid uint32, start uint64) int { return heldBy(pid, start) }

// heldByOther reports whether a live session other than the one whose PID
// is self holds the lock on pid (started at start, clock ticks).
func heldByOther(pid uint32, start uint64, self int) bool {
	owner := heldBy(pid, start)
	return owner != 0 && owner != self
}

// heldNow reports whether a session holds the lock on the process that
// has the PID pid now (by its start time now: the PID may have been
// reused since the caller last looked).
func heldNow(pid uint32) bool {
	st, err := procStartTime(int(pid))
	return err == nil && heldBy(pid, st) != 0
}

// readOwner reads the holder's PID from a lock file; 0 when unreadable. The
// holder writes it right after taking the lock: a reader that comes in
// between waits a little for it.
func readOwner(f *os.File) int {
	for i := 0; i < 50; i++ {
		var b [32]byte
		n, _ := f.ReadAt(b[:], 0)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && n > 0 && b[n-1] == '\n' {
			return pid
		}
		var ts = syscall.Timespec{Nsec: 2e6}
		_ = syscall.Nanosleep(&ts, nil)
	}
	return 0
}

// release removes the lock file and lets go of the lock, in that order (see
// lockProc). Safe on nil.
func (l *procLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = os.Remove(l.path)
	_ = l.f.Close()
	l.f = nil
}

// CheckTraced returns a *TracedError when another vramprof session traces
// pid, nil otherwise (also when pid does not exist: Attach says so). A
// caller checks before it creates anything that session may be using too
// (two attaches started in the same second share a default output
// directory); Attach takes the lock itself.
func CheckTraced(pid int) error {
	st, err := procStartTime(pid)
	if err != nil {
		return nil
	}
	l, err := lockProc(uint32(pid), st)
	l.release()
	return err
}

// removeLockFiles removes the lock files a dead session left (their locks
// went with it): those naming owner that nobody holds. Taking the lock
// first keeps this safe against a session locking the file meanwhile
// (lockProc checks that its file is still the one at the path).
func removeLockFiles(owner string) {
	paths, _ := filepath.Glob(filepath.Join(LockDir, "*.lock"))
	for _, path := range paths {
		// Never through a link, never blocking on a FIFO (see lockProc).
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			_ = f.Close()
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			var b [32]byte
			n, _ := f.ReadAt(b[:], 0)
			if strings.TrimSpace(string(b[:n])) == owner {
				_ = os.Remove(path)
			}
		}
		_ = f.Close()
	}
}
