package recorder

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vramprof/vramprof/probes/event"
	pysnapshot "github.com/vramprof/vramprof/profile/snapshot"
)

// SnapshotFile is what `report --format snapshot -o DIR` writes in DIR.
const SnapshotFile = "snapshot.pickle"

// IsSnapshot reports whether path is a PyTorch memory snapshot rather than a
// .vpt trace: by its extension, or by a pickle protocol header (PROTO 2-5)
// where a trace has its magic. Only a plain file is read: a pipe read here
// would lose what it read (Report reads its input once, and tells then).
func IsSnapshot(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".pickle", ".pkl":
		return true
	}
	if !isRegular(path) {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [2]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	return isPickleHead(head[:])
}

// Replay feeds every record of path (a .vpt trace or a snapshot pickle) to
// add, in order, reading it once. A trace cut short inside a record gives
// its whole records, then an error matching ErrTruncated.
func Replay(path string, add func(event.Record) error) error {
	if segs := SegmentsOf(path); len(segs) > 0 {
		return replaySegmentFiles(segs, nil, add) // a flight recorder's (--max-trace)
	}
	f, err := openInput(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = newSource(path, f).replay(add)
	return err
}

// ExportSnapshot replays the trace or snapshot at path and returns the
// PyTorch snapshot of one process: pid when pidSet, else the default one
// (pysnapshot.Builder.Default: the recorded process, else the highest
// segment peak). A pid without device events is a usage error naming those
// that have some. When other processes have events, one line on note says
// which was exported; another says how many blocks were left out for lying
// in segments allocated before tracing began, if any. A trace cut short is exported up to the cut, and the
// error matching ErrTruncated is returned with the snapshot.
func ExportSnapshot(path string, pid uint32, pidSet bool, note io.Writer) (*pysnapshot.Snapshot, error) {
	x := pysnapshot.NewExporter()
	return exportOf(x, Replay(path, x.Add), path, pid, pidSet, note)
}

// exportOf is ExportSnapshot once x has been fed path's records (err is
// the replay's error).
func exportOf(x *pysnapshot.Builder, err error, path string, pid uint32, pidSet bool, note io.Writer) (*pysnapshot.Snapshot, error) {
	if err != nil && !errors.Is(err, ErrTruncated) {
		return nil, err
	}
	procs := x.Processes()
	chosen, ok := x.Default()
	why := "the recorded process"
	if !chosen.Root {
		why = "the highest segment peak"
	}
	if pidSet {
		i := slices.IndexFunc(procs, func(p pysnapshot.Process) bool { return p.PID == pid })
		if i < 0 {
			if len(procs) == 0 {
				return nil, usageError(fmt.Errorf("report: --pid %d: no process has device events in %s", pid, path))
			}
			return nil, usageError(fmt.Errorf("report: --pid %d has no device events in %s; processes with device events: %s",
				pid, path, pidList(procs, nil)))
		}
		chosen, ok, why = procs[i], true, "as --pid asked"
	}
	s := x.Snapshot()
	if pidSet {
		var serr error
		if s, serr = x.SnapshotOf(pid); serr != nil {
			return nil, serr // not reached: pid is one of procs
		}
	}
	if ok {
		if line := snapshotNote(procs, chosen, why, !pidSet); line != "" {
			fmt.Fprintln(note, line)
		}
		if n := chosen.UntracedBlocks; n > 0 {
			fmt.Fprintf(note, "vramprof: the snapshot leaves out %d block allocations of pid %d inside segments allocated before tracing began (the viewer draws blocks in known segments only; the reports count them)\n",
				n, chosen.PID)
		}
	}
	return s, err
}

// snapshotNote is the line saying which process a snapshot holds when the
// recording has others with events; "" when it has none.
func snapshotNote(procs []pysnapshot.Process, chosen pysnapshot.Process, why string, hint bool) string {
	instances := 0
	for _, p := range procs {
		if p.PID == chosen.PID {
			instances++
		}
	}
	others := pidList(procs, &chosen.PID)
	if others == "" && instances < 2 {
		return ""
	}
	name := ""
	if len(chosen.Command) > 0 {
		name = " (" + filepath.Base(chosen.Command[0]) + ")"
	}
	line := fmt.Sprintf("vramprof: snapshot of pid %d%s, %s", chosen.PID, name, why)
	if instances > 1 {
		line += fmt.Sprintf("; pid %d was %d processes with device events (a reused PID or an exec), this is number %d",
			chosen.PID, instances, chosen.Instance+1)
	}
	if others != "" {
		line += "; other processes with device events: " + others
		if hint {
			line += " (choose one with --pid)"
		}
	}
	return line
}

// maxListedPIDs caps the PIDs one line names: attach --all can record
// hundreds.
const maxListedPIDs = 16

// pidList names the distinct PIDs of procs, except *skip when given.
func pidList(procs []pysnapshot.Process, skip *uint32) string {
	var pids []string
	seen := map[uint32]bool{}
	for _, p := range procs {
		if seen[p.PID] || skip != nil && p.PID == *skip {
			continue
		}
		seen[p.PID] = true
		pids = append(pids, strconv.FormatUint(uint64(p.PID), 10))
	}
	if n := len(pids); n > maxListedPIDs {
		pids = append(pids[:maxListedPIDs], fmt.Sprintf("and %d more", n-maxListedPIDs))
	}
	return strings.Join(pids, ", ")
}
