//go:build linux

package probes

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/vramprof/vramprof/probes/sigstate"
)

// The guardian resumes what the BPF side stopped when vramprof cannot.
//
// The loader and exec probes stop a target with SIGSTOP so that user space
// can probe its new mappings before they run; the session sends SIGCONT when
// it is done. If vramprof dies in between (kill -9, OOM killer, a crash),
// nobody would: the target would stay stopped forever. So every session
// starts a guardian: this executable again (/proc/self/exe), in a session
// and process group of its own (a signal to vramprof's group, or a hang-up
// of its terminal, does not reach it), holding two descriptors and nothing
// else:
//
//   - the read end of a pipe whose only write end vramprof holds: the kernel
//     closes it when vramprof dies, however it dies, and the read returns;
//   - a duplicate of the BPF map `stopped` (bpf/vramprof.bpf.c), where the
//     BPF side lists each process it stopped, with its start time, before
//     sending the signal, and the session removes it after its SIGCONT. The
//     duplicate keeps the map alive after vramprof's descriptors are gone.
//
// On a normal Close, the session resumes what the map lists itself and
// writes one byte before closing the pipe: the guardian exits at once. At
// end of file without that byte, vramprof died: the guardian sends SIGCONT to
// each process the map lists that is still the process that was stopped
// (same start time; a reused PID is left alone), and looks again a few
// times over a second, since the dying process's probes are detached by
// the kernel one descriptor at a time and may stop one more process after
// the pipe closed. Then it exits.
//
// The guardian can die first (killed by a user, by the OOM killer): so a
// session keeps two running, each on a pipe of its own and the same map,
// and starts another at once when one dies (see guardian.watch). A
// vramprof killed right after a guardian still leaves nothing stopped: the
// other resumes it.
//
// The guardian is entered from this package's init, before main, when
// guardianEnv is set: any program that imports probes (vramprof, and the
// package's own tests) can be its own guardian.

// guardianEnv marks the guardian's process: its value is the session's PID.
const guardianEnv = "VRAMPROF_GUARDIAN"

// guardianBye is the byte a session writes before closing the pipe
// normally.
const guardianBye = 'q'

// guardianRetries are the pauses between the guardian's looks at the map
// after vramprof died. The probes go with vramprof's descriptors, within
// milliseconds; a second covers a loaded machine.
var guardianRetries = []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond}

func init() {
	if os.Getenv(guardianEnv) == "" {
		return
	}
	os.Exit(guardianMain(os.Getenv(guardianEnv)))
}

// guardianCount is how many guardians a session keeps running: two, so
// that the death of one (killed by a user, by the OOM killer) never leaves
// a moment in which no process outside vramprof holds the stopped map.
// With one, a vramprof killed between its guardian's death and the start
// of the next one left the target stopped for ever.
const guardianCount = 2

// guardian is a session's guardians: guardianCount guardian processes, each
// on a pipe of its own and the same stopped map, and for each a goroutine
// that waits for it. Whichever notices vramprof's death first resumes what
// the map lists (resumeStopped claims each entry by deleting it, so a
// process is resumed once). A guardian that dies before the session ends
// is replaced at once by its goroutine (its Wait returns), while the other
// keeps guarding; if no other can start and none is left, the goroutine
// resumes what the map lists now (the session's probing of those
// processes may then miss their first calls, but none is left stopped) and
// says so.
type guardian struct {
	m *ebpf.Map // the stopped map, for each guardian started

	mu      sync.Mutex
	procs   [guardianCount]guardianProc
	closing bool  // close was called: exits are expected
	waitErr error // the first guardian exit that was an error, once closing

	watchers sync.WaitGroup // one per slot, until its watch returns
}

// guardianProc is one running guardian; cmd is nil once its slot is empty
// (none could start).
type guardianProc struct {
	cmd  *exec.Cmd
	pipe *os.File // its pipe's write end: vramprof's life, as it sees it
}

// startGuardian starts the guardians of a session whose stopped map is m.
func startGuardian(m *ebpf.Map) (*guardian, error) {
	g := &guardian{m: m}
	exits := make([]chan error, guardianCount)
	for i := range g.procs {
		cmd, pipe, exited, err := spawnGuardian(m)
		if err != nil {
			for _, p := range g.procs[:i] { // nothing is stopped yet: they go at once
				_, _ = p.pipe.Write([]byte{guardianBye})
				_ = p.pipe.Close()
			}
			return nil, err
		}
		g.procs[i] = guardianProc{cmd, pipe}
		exits[i] = exited
	}
	for i := range g.procs {
		g.watchers.Add(1)
		go g.watch(i, exits[i])
	}
	return g, nil
}

// pids returns the PIDs of the guardians running now.
func (g *guardian) pids() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	for _, p := range g.procs {
		if p.cmd != nil {
			out = append(out, p.cmd.Process.Pid)
		}
	}
	return out
}

// spawnGuardian starts one guardian process; exited receives its Wait's
// result when it ends.
func spawnGuardian(m *ebpf.Map) (cmd *exec.Cmd, pipe *os.File, exited chan error, err error) {
	sigstate.Spawn(func() { cmd, pipe, exited, err = spawnGuardianNow(m) })
	return cmd, pipe, exited, err
}

// spawnGuardianNow is spawnGuardian, outside any sigstate.ForExec window.
func spawnGuardianNow(m *ebpf.Map) (cmd *exec.Cmd, pipe *os.File, exited chan error, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start guardian: %w", err)
	}
	defer r.Close()
	fd, err := syscall.Dup(m.FD())
	if err != nil {
		_ = w.Close()
		return nil, nil, nil, fmt.Errorf("start guardian: dup stopped map: %w", err)
	}
	mf := os.NewFile(uintptr(fd), "stopped")
	defer mf.Close()
	// Not os.Executable's path: /proc/self/exe runs even when the file was
	// replaced or removed since vramprof started (an upgrade mid-run).
	cmd = exec.Command("/proc/self/exe")
	cmd.Args = []string{"vramprof-guardian"}
	cmd.Env = []string{fmt.Sprintf("%s=%d", guardianEnv, os.Getpid())}
	// Its own messages go where vramprof's do; nothing else is inherited
	// (Go opens every descriptor close-on-exec).
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{r, mf} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return nil, nil, nil, fmt.Errorf("start guardian: %w", err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd, w, exited, nil
}

// watch waits for each guardian of slot i to exit, and starts another
// while the session is not closing.
func (g *guardian) watch(i int, exited chan error) {
	defer g.watchers.Done()
	for {
		err := <-exited
		g.mu.Lock()
		if g.closing {
			if err != nil && g.waitErr == nil {
				g.waitErr = err
			}
			g.mu.Unlock()
			return
		}
		old := g.procs[i]
		_ = old.pipe.Close()
		cmd, pipe, next, serr := spawnGuardian(g.m)
		if serr != nil {
			g.procs[i] = guardianProc{}
			alone := true
			for _, p := range g.procs {
				alone = alone && p.cmd == nil
			}
			g.mu.Unlock()
			if !alone {
				fmt.Fprintf(os.Stderr, "vramprof: a guardian (pid %d) died (%v) and no other could start (%v): "+
					"one guards the processes stopped at a library load\n", old.cmd.Process.Pid, err, serr)
				return
			}
			resumed := resumeStopped(g.m, os.Getpid())
			fmt.Fprintf(os.Stderr, "vramprof: the guardian (pid %d) died (%v) and no other could start (%v): "+
				"resumed the %d processes stopped at a library load now; if vramprof dies at a later one, "+
				"resume it with kill -CONT\n", old.cmd.Process.Pid, err, serr, len(resumed))
			return
		}
		g.procs[i] = guardianProc{cmd, pipe}
		g.mu.Unlock()
		fmt.Fprintf(os.Stderr, "vramprof: the guardian (pid %d) died (%v): started another (pid %d)\n", old.cmd.Process.Pid, err, cmd.Process.Pid)
		exited = next
	}
}

// close tells the guardians that vramprof is ending normally and waits for
// them to exit.
func (g *guardian) close() error {
	g.mu.Lock()
	g.closing = true
	procs := g.procs
	g.mu.Unlock()
	var err error
	for _, p := range procs {
		if p.pipe == nil {
			continue
		}
		_, _ = p.pipe.Write([]byte{guardianBye})
		if cerr := p.pipe.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	g.watchers.Wait()
	if g.waitErr != nil && err == nil {
		err = fmt.Errorf("guardian: %w", g.waitErr)
	}
	return err
}

// guardianMain is the guardian's whole life; owner is its session's PID, for
// its messages.
func guardianMain(owner string) int {
	// A Ctrl-C, a hang-up or a SIGQUIT meant for vramprof is not for us;
	// SIGTERM is an order to do our job now and go.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	pipe := os.NewFile(3, "vramprof")
	m, err := ebpf.NewMapFromFD(4)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vramprof guardian: open stopped map: %v\n", err)
		return 1
	}
	defer m.Close()
	read := make(chan bool, 1) // whether the session said goodbye
	go func() {
		var b [1]byte
		for {
			n, err := pipe.Read(b[:])
			if n == 1 && b[0] == guardianBye {
				read <- true
				return
			}
			if err != nil {
				read <- false
				return
			}
		}
	}()
	normal := false
	select {
	case normal = <-read:
	case <-term:
	}
	ownerPID, _ := strconv.Atoi(owner)
	resumed := resumeStopped(m, ownerPID)
	if !normal {
		for _, d := range guardianRetries {
			time.Sleep(d)
			resumed = append(resumed, resumeStopped(m, ownerPID)...)
		}
	}
	for _, pid := range resumed {
		fmt.Fprintf(os.Stderr, "vramprof: session %s ended with pid %d stopped at a library load or exec: resumed it\n", owner, pid)
	}
	if !normal {
		removeLockFiles(owner)
	}
	return 0
}

// resumeStopped sends SIGCONT to every process m (the stopped map) lists
// that is still the process that was stopped and has no stop of the user's
// pending (resume), empties m, and returns the PIDs it resumed. owner is
// the PID of the session m belongs to.
//
// A process another live session holds (lock.go) is left to that session:
// an --all session (serve) stops a process a single-process session traces
// at the same rendezvous as that session does (the stops merge into one),
// and a SIGCONT from the --all session ending (or its guardian) would let
// it run on while its holder is still probing, whose calls would then be
// missed, or seen returning without their entry. The holder resumes it
// after its probing; if the holder dies, its own guardian does.
func resumeStopped(m *ebpf.Map, owner int) []uint32 {
	type entry struct {
		seq uint64
		st  bpfStop
	}
	var all []entry
	var seq uint64
	var st bpfStop
	for it := m.Iterate(); it.Next(&seq, &st); {
		all = append(all, entry{seq, st})
	}
	var resumed []uint32
	for _, e := range all {
		// Claimed by deleting it: of the guardians and the session looking
		// at once, the one whose delete takes the entry resumes the
		// process, once (a second SIGCONT would run a handler of the
		// target's again, and resend the stops resume passes on). By its
		// own stop's key: a process stopped again meanwhile has an entry
		// of its own, for the next look.
		if m.Delete(e.seq) != nil {
			continue
		}
		// A stop the user sent meanwhile stays (resume.go).
		if sameStart(e.st.Tgid, e.st.Start) && !heldByOther(e.st.Tgid, e.st.Start/clockTicksNs, owner) {
			user, err := resume(int(e.st.Tgid))
			if user != 0 {
				fmt.Fprintf(os.Stderr, "vramprof: pid %d was sent %v while stopped at a library load or exec: left stopped\n", e.st.Tgid, user)
			}
			if err == nil && user == 0 && !slices.Contains(resumed, e.st.Tgid) {
				resumed = append(resumed, e.st.Tgid)
			}
		}
	}
	return resumed
}

// clockTicksNs is the length of the clock tick /proc/PID/stat counts in
// (USER_HZ, 100 on every Linux architecture), in ns.
const clockTicksNs = 1e7

// sameStart reports whether pid is the process that started at start (ns
// since boot, the kernel's start_boottime).
func sameStart(pid uint32, start uint64) bool {
	ticks, err := procStartTime(int(pid))
	if err != nil {
		return false
	}
	return ticks == start/clockTicksNs
}
