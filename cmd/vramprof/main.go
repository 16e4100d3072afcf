// Command vramprof profiles CUDA GPU memory with eBPF: it sees every
// allocation and free of a running or launched process, and writes pprof
// profiles and reports that say what happened.
//
// The command line is read by kong (flags.go), into a flags struct per
// subcommand; its exec method does the work and returns an error, and main
// turns that error into one line that says what to do. The work itself
// lives in packages: probes traces, internal/recorder (this command's
// own) records, replays and loads recordings, report/compare judges and
// compares them, report/status draws the live status line,
// report/exporter serves metrics and profiles. Every signal vramprof
// handles is handled in signals.go.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vramprof/vramprof/probes/sigstate"
)

// version is vramprof's version, recorded in every trace, and commit the
// source commit it was built from: `make release` stamps both (go build
// -ldflags "-X main.version=... -X main.commit=..."); a plain go build
// keeps the version below and no commit. Variables, not constants, so that
// the linker can set them.
var (
	version = "0.1.0"
	commit  = ""
)

// versionLine is what --version prints: "vramprof VERSION (commit COMMIT)",
// or "vramprof VERSION (commit unknown)" for a build that was not stamped.
func versionLine() string {
	c := commit
	if c == "" {
		c = "unknown"
	}
	return "vramprof " + version + " (commit " + c + ")"
}

// Exit codes: a launched command's own code passes through `run`; 2 is
// vramprof's usage or tool error; a command `run` cannot start exits as a
// shell's would: 127 not found, 126 not executable.
const (
	exitToolError            = 2
	exitCommandNotExecutable = 126
	exitCommandNotFound      = 127
)

func main() {
	os.Exit(mainCode(os.Args[1:]))
}

func mainCode(args []string) int {
	switch {
	case len(args) == 0:
		printHelp(os.Stderr, "--help") // a mistake: the help goes with the error
		return exitToolError
	case args[0] == "help": // help [COMMAND]
		printHelp(os.Stdout, append(args[1:], "--help")...)
		return 0
	case args[0] == "-h" || args[0] == "--help" || args[0] == "--version":
		printHelp(os.Stdout, args[0])
		return 0
	}
	// What vramprof's parent ignored, vramprof ignores too (as any C
	// program would, and as the commands it runs will): the Go runtime
	// replaced those dispositions with its own handler before main.
	sigstate.Keep()
	ctx, stop := signalContext(context.Background())
	defer stop()

	code, err := dispatch(ctx, args[0], args[1:])
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vramprof: %s\n", explain(err))
		return exitCodeOf(args[0], err)
	}
	return code
}

// dispatch parses the command's flags and runs it.
func dispatch(ctx context.Context, name string, args []string) (int, error) {
	cmd, err := parseCommand(name, args)
	if err != nil {
		return 0, err
	}
	return cmd.exec(ctx)
}
