// Command vramprof profiles CUDA GPU memory with eBPF: it sees every
// allocation and free of a running or launched process, and writes pprof
// profiles and reports that say what happened.
//
// Each subcommand lives in its own file: flags are parsed into an options
// struct, one function does the work and returns an error, and main turns
// that error into one line that says what to do.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: vramprof <command> [flags]

  run     [-o DIR] [--force] [--pool auto|off] [--allocators FILE] [--python auto|off] [--nvml auto|off] [-q] -- CMD [ARGS...]
                                             launch CMD and trace it from its first CUDA call
  attach  (-p PID | --all) [-o DIR] [--force] [--duration D] [--wait] [--pool auto|off] [--allocators FILE] [--python auto|off] [--nvml auto|off] [-q]
                                             trace a running process (or every CUDA process)
  report  INPUT [-o DIR [--force]] [--format text|md|json|html|snapshot [--pid PID]]
                                             re-analyse a recording or a PyTorch snapshot (no root needed)
  check   [--max-peak SIZE] [--max-leak SIZE] [--baseline FILE --max-increase PCT] [--allow-lost PCT]
          [--write-baseline FILE] [--junit FILE] [-o DIR] [--force] (-- CMD [ARGS...] | INPUT)
                                             gate CI on GPU memory: exit 0 pass, 1 regression,
                                             2 error or unknown (events lost)
  diff    BASE NEW [--format text|json]      compare two recordings (DIRs, traces or report.json files)
  serve   [--listen 127.0.0.1:9400] [--grace D] [--ttl D] [--pool auto|off] [--python auto|off] [-q]
                                             a node daemon: trace every CUDA process, serve Prometheus
                                             metrics (/metrics) and pprof (/debug/pprof/{inuse,peak,alloc}?pid=N)

Outputs in DIR: trace.vpt, profile.pb.gz (go tool pprof -http=: DIR/profile.pb.gz), report.json,
report.md, report.html; with a caching allocator traced, oom-<n>.pb.gz at each failed allocation.
`

// version is vramprof's version, recorded in every trace.
const version = "0.1.0"

// Exit codes: a launched command's own code passes through `run`; 2 is
// vramprof's usage or tool error.
const exitToolError = 2

func main() {
	os.Exit(mainCode(os.Args[1:]))
}

func mainCode(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, usage)
		if len(args) == 0 {
			return exitToolError
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	code, err := dispatch(ctx, args[0], args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vramprof: %s\n", explain(err))
		return exitToolError
	}
	return code
}

func dispatch(ctx context.Context, cmd string, args []string) (int, error) {
	switch cmd {
	case "run":
		o, err := parseRun(args)
		if err != nil {
			return 0, err
		}
		return run(ctx, o)
	case "attach":
		o, err := parseAttach(args)
		if err != nil {
			return 0, err
		}
		return 0, attach(ctx, o)
	case "report":
		o, err := parseReport(args)
		if err != nil {
			return 0, err
		}
		return 0, reportCmd(o, os.Stdout, os.Stderr)
	case "check":
		o, err := parseCheck(args)
		if err != nil {
			return 0, err
		}
		return checkCmd(ctx, o, os.Stdout)
	case "diff":
		o, err := parseDiff(args)
		if err != nil {
			return 0, err
		}
		return 0, diffCmd(o, os.Stdout)
	case "serve":
		o, err := parseServe(args)
		if err != nil {
			return 0, err
		}
		return 0, serve(ctx, o)
	default:
		return 0, usageError(fmt.Errorf("unknown command %q; run 'vramprof help'", cmd))
	}
}
