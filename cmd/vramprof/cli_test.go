package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/report/exporter"
)

// TestHelpOnStdout: -h, --help and help [COMMAND] print on stdout and exit
// 0; no arguments at all prints the same help on stderr and exits 2.
func TestHelpOnStdout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		words []string
	}{
		{"top", []string{"--help"}, []string{"Usage: vramprof <command>", "run", "attach", "report", "check", "diff", "serve", "--version"}},
		{"top short", []string{"-h"}, []string{"Usage: vramprof <command>"}},
		{"help command", []string{"help"}, []string{"Usage: vramprof <command>"}},
		{"help run", []string{"help", "run"}, []string{"Usage: vramprof run", "--max-trace=SIZE"}},
		{"run -h", []string{"run", "-h"}, []string{"Usage: vramprof run", "-o, --output=DIR"}},
		{"check --help", []string{"check", "--help"}, []string{"Usage: vramprof check", "--max-peak=SIZE", "--nvml", "--pool", "--python", "--capacity"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := vramprof(t, execOpts{dir: t.TempDir()}, tc.args...)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			assert.Empty(t, r.stderr)
			for _, w := range tc.words {
				assert.Contains(t, r.stdout, w)
			}
		})
	}
	r := vramprof(t, execOpts{dir: t.TempDir()})
	assert.Equal(t, exitToolError, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "Usage: vramprof <command>")
}

// TestHelpQuietOnce: -q and --quiet are one flag, shown once, in every
// command that takes it.
func TestHelpQuietOnce(t *testing.T) {
	for _, cmd := range []string{"run", "attach", "check", "serve"} {
		r := vramprof(t, execOpts{dir: t.TempDir()}, cmd, "--help")
		require.Equal(t, 0, r.code, "%s: stderr:\n%s", cmd, r.stderr)
		assert.Equal(t, 1, strings.Count(r.stdout, "-q, --quiet"), "%s:\n%s", cmd, r.stdout)
		assert.Equal(t, 1, strings.Count(r.stdout, "--quiet"), "%s:\n%s", cmd, r.stdout)
	}
}

// TestVersion prints the version recorded in traces on stdout, and the
// commit, "unknown" in a build that make release did not stamp.
func TestVersion(t *testing.T) {
	r := vramprof(t, execOpts{dir: t.TempDir()}, "--version")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	assert.Equal(t, "vramprof "+version+" (commit unknown)\n", r.stdout)
	assert.Empty(t, r.stderr)
}

// TestUsageErrorsOneLine: a parse error kong finds is one line on stderr
// naming the command and the flag, and exit 2.
func TestUsageErrorsOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--bogus", "--", "true"},
		{"report", "x.vpt", "--bogus"},
		{"check", "--bogus", "x.vpt"},
		{"diff", "--bogus", "a", "b"},
		{"serve", "--bogus"},
		{"attach", "-p", "abc"},
	} {
		r := vramprof(t, execOpts{dir: t.TempDir()}, args...)
		assert.Equal(t, exitToolError, r.code, "%v", args)
		lines := r.stderrLines()
		require.Len(t, lines, 1, "%v: one line:\n%s", args, r.stderr)
		assert.True(t, strings.HasPrefix(lines[0], "vramprof: "+args[0]+": "), "%v: %s", args, lines[0])
		assert.Empty(t, r.stdout)
	}
}

// TestCheckRecordingFlags: check takes run's recording flags, and checks
// them as run does.
func TestCheckRecordingFlags(t *testing.T) {
	o, err := parse[*checkFlags]("check", []string{"--max-peak", "1GiB", "-q", "--pool", "off", "--python", "off", "--python-depth", "8",
		"--nvml", "off", "--capacity", "80GiB", "--", "train", "--epochs", "2"})
	require.NoError(t, err)
	assert.True(t, o.Quiet)
	assert.Equal(t, "off", o.Pool)
	assert.Equal(t, "off", o.NVML)
	assert.Equal(t, pythonFlags{Mode: "off", Depth: 8}, o.Python)
	assert.Equal(t, uint64(80<<30), o.capacity)
	assert.Equal(t, []string{"train", "--epochs", "2"}, o.argv)
	require.NotNil(t, o.limits.MaxPeak)
	assert.Equal(t, uint64(1<<30), *o.limits.MaxPeak)

	o, err = parse[*checkFlags]("check", []string{"in.vpt", "--max-leak", "1MiB"})
	require.NoError(t, err)
	assert.Equal(t, "auto", o.Pool, "the defaults are run's")
	assert.Equal(t, "auto", o.NVML)
	assert.Equal(t, pythonFlags{Mode: "auto", Depth: maxPythonDepth}, o.Python)
	assert.Equal(t, []string{"in.vpt"}, o.Input)
	assert.Nil(t, o.argv)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-peak", "1GiB", "--nvml", "maybe", "--", "true"}, `check: --nvml "maybe": use auto or off`},
		{[]string{"--max-peak", "1GiB", "--capacity", "big", "--", "true"}, `check: invalid value "big" for flag -capacity`},
		{[]string{"--max-peak", "1GiB", "--python-depth", "0", "--", "true"}, "check: --python-depth 0 is out of range"},
	} {
		_, err := parse[*checkFlags]("check", tc.args)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestRunFlags: run's command is everything after --, or from the first
// argument that is not a flag; flags and their defaults as before kong.
func TestRunFlags(t *testing.T) {
	o, err := parse[*runFlags]("run", []string{"-o", "out", "-q", "--force", "--", "python", "-u", "train.py"})
	require.NoError(t, err)
	assert.Equal(t, "out", o.Output)
	assert.True(t, o.Quiet)
	assert.True(t, o.Force)
	assert.Equal(t, []string{"python", "-u", "train.py"}, o.Command)
	assert.Equal(t, defaultMomentInterval, o.MomentInterval)
	assert.Equal(t, pythonFlags{Mode: "auto", Depth: maxPythonDepth}, o.Python)

	o, err = parse[*runFlags]("run", []string{"--quiet", "python", "-u", "train.py"})
	require.NoError(t, err)
	assert.True(t, o.Quiet)
	assert.Equal(t, []string{"python", "-u", "train.py"}, o.Command, "flags after the command are its own")

	o, err = parse[*runFlags]("run", []string{"--", "--", "x"})
	require.NoError(t, err)
	assert.Equal(t, []string{"--", "x"}, o.Command, "only the first -- ends the flags")
}

// TestFlagsGoSyntax: the flag forms Go's flag package took still work: a
// value that begins with a dash, one dash before a long flag, two before
// a short one, and -o=DIR; a command's own flags are left alone.
func TestFlagsGoSyntax(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want runFlags
	}{
		{"one dash", []string{"-force", "-moment-interval", "5s", "--", "true"}, runFlags{liveFlags: liveFlags{Force: true, MomentInterval: 5 * time.Second}}},
		{"equals", []string{"-o=out", "--", "true"}, runFlags{liveFlags: liveFlags{Output: "out"}}},
		{"two dashes short", []string{"--o", "out", "--q", "true"}, runFlags{liveFlags: liveFlags{Output: "out"}, recordFlags: recordFlags{Quiet: true}}},
		{"dash value", []string{"-o", "-out-", "true"}, runFlags{liveFlags: liveFlags{Output: "-out-"}}},
		{"command's flags", []string{"-q", "true", "-o=x", "--force"}, runFlags{recordFlags: recordFlags{Quiet: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse[*runFlags]("run", tc.args)
			require.NoError(t, err)
			assert.Equal(t, tc.want.Output, o.Output)
			assert.Equal(t, tc.want.Force, o.Force)
			assert.Equal(t, tc.want.Quiet, o.Quiet)
			if tc.want.MomentInterval != 0 {
				assert.Equal(t, tc.want.MomentInterval, o.MomentInterval)
			}
			assert.Equal(t, "true", o.Command[0])
		})
	}
	_, err := parse[*runFlags]("run", []string{"--moment-interval", "-1s", "--", "true"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run: --moment-interval -1s is negative")
}

// parse parses `vramprof name args...` (parseCommand) into F, the command's
// flags.
func parse[F command](name string, args []string) (F, error) {
	c, err := parseCommand(name, args)
	f, _ := c.(F)
	return f, err
}

// TestHelpDefaults: every flag with a default shows it in its command's
// help, no hidden argument shows as [<extra> ...], and the top-level help
// names the moment directories and OOM profiles as the code names them.
func TestHelpDefaults(t *testing.T) {
	k, err := newParser(nil)
	require.NoError(t, err)
	for _, node := range k.Model.Children {
		t.Run(node.Name, func(t *testing.T) {
			var b strings.Builder
			printHelp(&b, node.Name, "--help")
			help := strings.Join(strings.Fields(b.String()), " ") // unwrapped
			assert.NotContains(t, help, "<extra>")
			for _, f := range node.Flags {
				if f.Default == "" || f.IsBool() {
					continue
				}
				assert.Contains(t, help, "(default: "+f.Default+")", "--%s", f.Name)
			}
		})
	}
	for _, tc := range []struct{ cmd, flag, def string }{
		{"serve", "listen", defaultListen},
		{"serve", "grace", exporter.DefaultGrace.String()},
		{"serve", "ttl", exporter.DefaultTTL.String()},
		{"run", "moment-interval", defaultMomentInterval.String()},
		{"attach", "moment-interval", defaultMomentInterval.String()},
	} {
		var b strings.Builder
		printHelp(&b, tc.cmd, "--help")
		help := strings.Join(strings.Fields(b.String()), " ")
		assert.Regexp(t, `--`+tc.flag+`=\S+ (?:\S| [^-])*? \(default: `+regexp.QuoteMeta(tc.def)+`\)`, help, "%s --%s", tc.cmd, tc.flag)
	}
	var b strings.Builder
	printHelp(&b, "--help")
	help := strings.Join(strings.Fields(b.String()), " ")
	assert.Contains(t, help, "DIR/moments/"+recorder.MomentName(analysis.MomentOOM, "<n>", "<time>")+"/")
	assert.Contains(t, help, "oom-<n>.pb.gz")
	assert.Equal(t, "oom-3.pb.gz", analysis.OOMProfileName(&analysis.OOM{Index: 3}))
	assert.NotContains(t, help, "<extra>")
}
