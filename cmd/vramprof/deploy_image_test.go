//go:build linux

package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// containerScript runs a command as the DaemonSet's container runs, in a
// mount namespace of its own (unshare, private propagation: nothing here
// reaches the host's mounts): the image's file system $1 as the root, read
// only (readOnlyRootFilesystem); the node's /proc (hostPID), /sys and
// /dev; the node's /run/vramprof read only (the manifest's hostPath
// volume). The rest of the arguments are the command, run in that root.
const containerScript = `set -e
root=$1
shift
mount --bind "$root" "$root"
for d in proc sys dev; do mount --rbind "/$d" "$root/$d"; done
mkdir -p /run/vramprof "$root/run/vramprof"
mount --bind /run/vramprof "$root/run/vramprof"
mount -o remount,bind,ro "$root/run/vramprof"
mount -o remount,bind,ro "$root"
exec chroot "$root" "$@"`

// TestDeployImageServes builds the image deploy/Dockerfile describes and
// runs it as deploy/kubernetes.yaml's DaemonSet does, with no container
// runtime: the image stage's base, Debian's <codename>-slim, from Debian's
// own packages (testdata/image/rootfs.sh: mmdebstrap's minbase, as Debian
// builds its slim images); its COPY lines applied, the binary being `make
// release`'s (the build stage's RUN, checked by TestDeployDockerfile);
// then the image's ENTRYPOINT with the container's args (POD_IP the
// loopback address, the port a free one), within the container's
// capabilities (setpriv from the image's own util-linux), its root file
// system read only, the node's PIDs. The release binary must run on the
// image's glibc, and serve must trace a CUDA program on the node (longrun),
// its figures on /metrics equal to the program's truth, and stop cleanly
// on SIGTERM (the kubelet's stop signal).
func TestDeployImageServes(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tool := range []string{"unshare", "mount", "chroot", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "%s (util-linux, coreutils, tar) runs the image: %v", tool, err)
		}
	}
	_, stages := readDockerfile(t, dockerfileFile)
	require.Len(t, stages, 2, "a build stage and the image")
	image := stages[1]
	codename := regexp.MustCompile(`^debian:(\w+)-slim$`).FindStringSubmatch(image.from)
	require.NotNil(t, codename, "the image stage is FROM debian:<codename>-slim, not %q", image.from)

	out, err := exec.Command(filepath.Join(probetest.Root(), "testdata", "image", "rootfs.sh"), codename[1]).Output()
	base := strings.TrimSpace(string(out))
	if err != nil || base == "" {
		skipOrFail(t, "testdata/image/rootfs.sh %s: %v: the Debian mirror and mmdebstrap (apt-get install mmdebstrap) build the image's base", codename[1], err)
	}
	root := filepath.Join(t.TempDir(), "root")
	require.NoError(t, os.Mkdir(root, 0o755))
	tarOut, err := exec.Command("tar", "-xf", base, "-C", root).CombinedOutput()
	require.NoError(t, err, "unpack %s: %s", base, tarOut)

	// The build stage: make release, into a folder of ours.
	rel := t.TempDir()
	mk := exec.Command("make", "-s", "release", "RELEASE="+rel)
	mk.Dir = probetest.Root()
	mkOut, err := mk.CombinedOutput()
	require.NoError(t, err, "make release: %s", mkOut)

	// The image stage's lines.
	var entrypoint []string
	copies := 0
	for _, l := range image.lines {
		switch l[0] {
		case "COPY":
			f := strings.Fields(l[1])
			var src, dst string
			switch {
			case len(f) == 3 && f[0] == "--from=build":
				src, dst = filepath.Join(rel, filepath.Base(f[1])), f[2]
			case len(f) == 2:
				src, dst = filepath.Join(probetest.Root(), f[0]), f[1]
			default:
				t.Fatalf("COPY %s: not a form this test applies", l[1])
			}
			copyFile(t, src, filepath.Join(root, dst))
			copies++
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(l[1]), &entrypoint), "ENTRYPOINT in exec form")
		case "EXPOSE", "CMD":
		default:
			t.Fatalf("the image stage's %s %s: not a line this test applies", l[0], l[1])
		}
	}
	require.Equal(t, 2, copies, "the binary and the LICENSE")
	require.NotEmpty(t, entrypoint)

	// The DaemonSet's container.
	data, err := os.ReadFile(manifestFile)
	require.NoError(t, err)
	m, err := readManifests(data)
	require.NoError(t, err)
	require.Len(t, m.ds.Spec.Template.Spec.Containers, 1)
	c := m.ds.Spec.Template.Spec.Containers[0]
	require.True(t, m.ds.Spec.Template.Spec.HostPID, "hostPID")
	sc := c.SecurityContext
	require.NotNil(t, sc)
	require.NotNil(t, sc.ReadOnlyRootFilesystem)
	require.True(t, *sc.ReadOnlyRootFilesystem, "the script mounts the root read only, as the manifest says")
	addr := freeLoopback(t)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = strings.ReplaceAll(a, "$(POD_IP)", "127.0.0.1")
		if i > 0 && c.Args[i-1] == "--listen" {
			host, _, err := net.SplitHostPort(args[i])
			require.NoError(t, err)
			args[i] = net.JoinHostPort(host, port)
		}
	}
	// Series per process, so that longrun's own figures can be read.
	args = append(args, "--per-process")
	var caps []string
	bounding := "-all"
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, "CAP_"+string(c))
		bounding += ",+" + strings.ToLower(string(c))
	}
	require.Equal(t, []string{"ALL"}, toStrings(sc.Capabilities.Drop))

	lr := startLongrun(t)
	argv := append([]string{"--mount", "--", "sh", "-c", containerScript, "sh", root,
		"setpriv", "--bounding-set=" + bounding, "--inh-caps=-all", "--no-new-privs", "--"}, entrypoint...)
	cmd := exec.Command("unshare", append(argv, args...)...)
	sv := startDeployedServe(t, cmd, "http://"+addr)
	// unshare, sh, chroot and setpriv each exec the next: the PID is serve's.
	exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/root")
	require.NoError(t, err)
	assert.Equal(t, root, exe, "serve runs in the image's root")
	assertCapBounding(t, cmd.Process.Pid, caps)
	sv.tracesLongrun(t, lr)
	sv.stop(t)
}

// copyFile copies src to dst (its folders made), keeping its mode.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	st, err := os.Stat(src)
	require.NoError(t, err)
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, b, st.Mode().Perm()))
}

// toStrings converts a slice of a string type.
func toStrings[S ~string](in []S) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}
