package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vramprof/vramprof/analysis"
)

// interpreterLines says, one line per interpreter (processes running the
// same one share a line), whose Python frames the stacks hold, or why not:
// "python stacks: CPython 3.11.2 (/usr/bin/python3.11), pids 7 8". Empty when
// no interpreter was found (native stacks only, nothing to say).
func interpreterLines(run *analysis.Run) []string {
	type key struct{ name, version, path, note string }
	var order []key
	pids := map[key][]string{}
	for _, in := range run.Interpreters {
		k := key{in.Name, in.Version, in.Path, in.Note}
		if _, ok := pids[k]; !ok {
			order = append(order, k)
		}
		pids[k] = append(pids[k], strconv.FormatUint(uint64(in.PID), 10))
	}
	var lines []string
	for _, k := range order {
		if k.note != "" {
			lines = append(lines, k.note)
			continue
		}
		ps := slices.Compact(pids[k])
		word := "pid"
		if len(ps) > 1 {
			word = "pids"
		}
		lines = append(lines, fmt.Sprintf("python stacks: %s %s (%s), %s %s", k.name, k.version, k.path, word, strings.Join(ps, " ")))
	}
	return lines
}
