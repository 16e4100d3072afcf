package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

// runOptions are the flags of `vramprof run`.
type runOptions struct {
	out  string
	argv []string
}

func parseRun(args []string) (*runOptions, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	o := &runOptions{}
	fs.StringVar(&o.out, "o", "", "output directory (default ./vramprof-<pid>-<time>)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: vramprof run [-o DIR] -- CMD [ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, usageError(err)
	}
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		return nil, usageError(errors.New("run: no command given; usage: vramprof run [-o DIR] -- CMD [ARGS...]"))
	}
	return o, nil
}

// attachOptions are the flags of `vramprof attach`.
type attachOptions struct {
	pid      int
	out      string
	duration time.Duration
	wait     bool
}

func parseAttach(args []string) (*attachOptions, error) {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	o := &attachOptions{}
	fs.IntVar(&o.pid, "p", 0, "PID of the process to trace (required)")
	fs.StringVar(&o.out, "o", "", "output directory (default ./vramprof-<pid>-<time>)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (default: until Ctrl-C or the process exits)")
	fs.BoolVar(&o.wait, "wait", false, "wait for a process that has not loaded CUDA yet")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: vramprof attach -p PID [-o DIR] [--duration D] [--wait]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, usageError(err)
	}
	if fs.NArg() > 0 {
		return nil, usageError(fmt.Errorf("attach: unexpected argument %q; usage: vramprof attach -p PID [-o DIR]", fs.Arg(0)))
	}
	if o.pid <= 0 {
		return nil, usageError(errors.New("attach: -p PID is required (a positive process ID)"))
	}
	if o.duration < 0 {
		return nil, usageError(fmt.Errorf("attach: --duration %s is negative", o.duration))
	}
	return o, nil
}
