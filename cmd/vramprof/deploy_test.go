//go:build linux

package main

// The deploy files (deploy/): the Kubernetes manifests decoded strictly into
// the API's own types and validated with the API machinery's rules, the
// container image's command line, and the systemd unit verified by
// systemd-analyze and its command line run as systemd would run it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/exporter"
)

const (
	unitFile       = "deploy/vramprof.service"
	manifestFile   = "deploy/kubernetes.yaml"
	dockerfileFile = "deploy/Dockerfile"
	// unitBinary is the binary the unit runs as shipped; make install
	// rewrites it to $(BINDIR)/vramprof.
	unitBinary = "/usr/local/bin/vramprof"
)

// decodeStrict decodes one YAML document into obj as the API server does
// with fieldValidation=Strict: a duplicate key, an unknown field or a field
// in the wrong case (the API is case-sensitive, encoding/json is not) is an
// error.
func decodeStrict(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// manifests are the objects of deploy/kubernetes.yaml, decoded strictly.
type manifests struct {
	ns  *corev1.Namespace
	ds  *appsv1.DaemonSet
	svc *corev1.Service
}

// readManifests splits data into its YAML documents and decodes each into
// the API type its apiVersion and kind name; any other kind, a wrong
// apiVersion or a second object of a kind is an error.
func readManifests(data []byte) (*manifests, error) {
	var m manifests
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var obj any
		var want string
		switch tm.Kind {
		case "Namespace":
			if m.ns != nil {
				return nil, fmt.Errorf("document %d: a second Namespace", i)
			}
			m.ns, want = &corev1.Namespace{}, corev1.SchemeGroupVersion.String()
			obj = m.ns
		case "DaemonSet":
			if m.ds != nil {
				return nil, fmt.Errorf("document %d: a second DaemonSet", i)
			}
			m.ds, want = &appsv1.DaemonSet{}, appsv1.SchemeGroupVersion.String()
			obj = m.ds
		case "Service":
			if m.svc != nil {
				return nil, fmt.Errorf("document %d: a second Service", i)
			}
			m.svc, want = &corev1.Service{}, corev1.SchemeGroupVersion.String()
			obj = m.svc
		default:
			return nil, fmt.Errorf("document %d: unexpected kind %q", i, tm.Kind)
		}
		if tm.APIVersion != want {
			return nil, fmt.Errorf("document %d: %s has apiVersion %q, want %q", i, tm.Kind, tm.APIVersion, want)
		}
		if err := decodeStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, tm.Kind, err)
		}
	}
	if m.ns == nil || m.ds == nil || m.svc == nil {
		return nil, errors.New("want a Namespace, a DaemonSet and a Service")
	}
	return &m, nil
}

// TestDeployManifestsStrict: the strict decoding the manifests pass rejects
// what the API server's strict field validation rejects. Each case breaks
// the shipped file one way; without that break the same file decodes.
func TestDeployManifestsStrict(t *testing.T) {
	data, err := os.ReadFile(manifestFile)
	require.NoError(t, err)
	_, err = readManifests(data)
	require.NoError(t, err)
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown field", "hostPID: true", "hostPIDs: true", `unknown field "spec.template.spec.hostPIDs"`},
		{"wrong case", "hostPID: true", "hostPid: true", `unknown field "spec.template.spec.hostPid"`},
		{"duplicate key", "hostPID: true", "hostPID: true\n      hostPID: true", "already set in map"},
		{"wrong type", "containerPort: 10477", `containerPort: "metrics"`, "cannot unmarshal string"},
		{"wrong apiVersion", "apiVersion: apps/v1", "apiVersion: extensions/v1beta1", `want "apps/v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := strings.Replace(string(data), tc.old, tc.new, 1)
			require.NotEqual(t, string(data), broken, "%q not in %s", tc.old, manifestFile)
			_, err := readManifests([]byte(broken))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestDeployManifests validates deploy/kubernetes.yaml without a cluster:
// strict decoding into k8s.io/api's types (above), the API machinery's
// rules for names, labels, annotations, selectors and ports, and what serve
// needs of its pod: the node's PIDs, NVML through the NVIDIA runtime, its
// capabilities, and one port everywhere (its arguments, as serve's own
// flag parser reads them, the container port, the Service and the scrape
// annotations).
func TestDeployManifests(t *testing.T) {
	data, err := os.ReadFile(manifestFile)
	require.NoError(t, err)
	m, err := readManifests(data)
	require.NoError(t, err)
	ns, ds, svc := m.ns, m.ds, m.svc

	t.Run("api rules", func(t *testing.T) {
		var errs field.ErrorList
		errs = append(errs, apivalidation.ValidateObjectMeta(&ns.ObjectMeta, false, apivalidation.ValidateNamespaceName, field.NewPath("namespace", "metadata"))...)
		errs = append(errs, apivalidation.ValidateObjectMeta(&ds.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("daemonset", "metadata"))...)
		errs = append(errs, apivalidation.ValidateObjectMeta(&svc.ObjectMeta, true, apivalidation.NameIsDNS1035Label, field.NewPath("service", "metadata"))...)
		tmpl := field.NewPath("daemonset", "spec", "template")
		errs = append(errs, metavalidation.ValidateLabels(ds.Spec.Template.Labels, tmpl.Child("metadata", "labels"))...)
		errs = append(errs, apivalidation.ValidateAnnotations(ds.Spec.Template.Annotations, tmpl.Child("metadata", "annotations"))...)
		errs = append(errs, metavalidation.ValidateLabelSelector(ds.Spec.Selector, metavalidation.LabelSelectorValidationOptions{}, field.NewPath("daemonset", "spec", "selector"))...)
		assert.Empty(t, errs.ToAggregate())

		require.NotNil(t, ds.Spec.Selector, "spec.selector is required")
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		require.NoError(t, err)
		assert.False(t, sel.Empty(), "an empty selector selects every pod")
		assert.True(t, sel.Matches(labels.Set(ds.Spec.Template.Labels)), "the selector must match the template's labels")
		assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)), "the Service must select the DaemonSet's pods")
		assert.NotEmpty(t, svc.Spec.Selector)
		assert.Equal(t, ns.Name, ds.Namespace)
		assert.Equal(t, ns.Name, svc.Namespace)
		// hostPID and these capabilities are beyond the baseline standard.
		assert.Equal(t, "privileged", ns.Labels["pod-security.kubernetes.io/enforce"])

		pod := ds.Spec.Template.Spec
		require.Len(t, pod.Containers, 1)
		c := pod.Containers[0]
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			t.Errorf("container name %q: %s", c.Name, msg)
		}
		assert.NotEmpty(t, c.Image)
		vols := map[string]bool{}
		for _, v := range pod.Volumes {
			vols[v.Name] = true
		}
		for _, vm := range c.VolumeMounts {
			assert.True(t, vols[vm.Name], "volume mount %q names no volume", vm.Name)
		}
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				t.Errorf("env %q: %s", e.Name, msg)
			}
		}
		for _, p := range c.Ports {
			for _, msg := range validation.IsValidPortName(p.Name) {
				t.Errorf("port name %q: %s", p.Name, msg)
			}
			for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
				t.Errorf("port %d: %s", p.ContainerPort, msg)
			}
		}
	})

	pod := ds.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}

	t.Run("nvml", func(t *testing.T) {
		assert.True(t, pod.HostPID, "hostPID: serve traces the node's processes by their PIDs")
		if assert.NotNil(t, pod.RuntimeClassName) {
			assert.Equal(t, "nvidia", *pod.RuntimeClassName, "the NVIDIA container runtime mounts libnvidia-ml")
		}
		assert.Equal(t, "all", env["NVIDIA_VISIBLE_DEVICES"].Value)
		// NVML is in the driver's "utility" capability.
		assert.Contains(t, strings.Split(env["NVIDIA_DRIVER_CAPABILITIES"].Value, ","), "utility")
	})

	t.Run("privileges", func(t *testing.T) {
		sc := c.SecurityContext
		require.NotNil(t, sc)
		require.NotNil(t, sc.Capabilities)
		assert.Contains(t, sc.Capabilities.Drop, corev1.Capability("ALL"))
		// probes.CheckPrivileges refuses without BPF and PERFMON; without
		// SYS_PTRACE other users' processes are silently not traced.
		for _, want := range []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE"} {
			assert.Contains(t, sc.Capabilities.Add, want)
		}
		if assert.NotNil(t, sc.RunAsUser) {
			assert.Zero(t, *sc.RunAsUser, "root: the capabilities are those of uid 0")
		}
		mounted := map[string]string{}
		for _, vm := range c.VolumeMounts {
			mounted[vm.MountPath] = vm.Name
		}
		assert.Contains(t, mounted, "/run/vramprof", "the host's lock files of run and attach sessions")
	})

	t.Run("runtime dirs", func(t *testing.T) {
		// Every directory serve reads bundles in (its --runtime-dirs, as
		// its flag parser reads the arguments) is the node's own,
		// mounted read-only at the same path, its unmounts propagated.
		cmd, err := parseCommand(c.Args[0], c.Args[1:])
		require.NoError(t, err)
		sf, ok := cmd.(*serveFlags)
		require.True(t, ok)
		require.NotEmpty(t, sf.RuntimeDirs)
		vols := map[string]corev1.Volume{}
		for _, v := range pod.Volumes {
			vols[v.Name] = v
		}
		for _, d := range sf.RuntimeDirs {
			i := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == d })
			if !assert.GreaterOrEqual(t, i, 0, "--runtime-dirs %s is not mounted", d) {
				continue
			}
			vm := c.VolumeMounts[i]
			assert.True(t, vm.ReadOnly, "%s: read-only", d)
			if assert.NotNil(t, vm.MountPropagation, "%s", d) {
				assert.Equal(t, corev1.MountPropagationHostToContainer, *vm.MountPropagation, "%s", d)
			}
			if hp := vols[vm.Name].HostPath; assert.NotNil(t, hp, "%s: a hostPath volume", d) {
				assert.Equal(t, d, hp.Path, "the node's directory at the same path")
			}
		}
	})

	t.Run("port", func(t *testing.T) {
		require.Len(t, c.Ports, 1)
		port := c.Ports[0]
		assert.Equal(t, defaultPort, strconv.Itoa(int(port.ContainerPort)))

		// The arguments as serve reads them, $(VAR) expanded from the env
		// as the kubelet does; every variable they name is defined.
		args := c.Args
		if len(c.Command) > 0 {
			args = append(c.Command[1:], args...)
		}
		ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
		var expanded []string
		for _, a := range args {
			expanded = append(expanded, ref.ReplaceAllStringFunc(a, func(s string) string {
				name := ref.FindStringSubmatch(s)[1]
				e, ok := env[name]
				if assert.True(t, ok, "args use $(%s), which env does not define", name) && name == "POD_IP" {
					require.NotNil(t, e.ValueFrom)
					require.NotNil(t, e.ValueFrom.FieldRef)
					assert.Equal(t, "status.podIP", e.ValueFrom.FieldRef.FieldPath)
					return "10.1.2.3"
				}
				return e.Value
			}))
		}
		require.NotEmpty(t, expanded)
		require.Equal(t, "serve", expanded[0])
		cmd, err := parseCommand(expanded[0], expanded[1:])
		require.NoError(t, err, "serve's flags %q", expanded[1:])
		sf, ok := cmd.(*serveFlags)
		require.True(t, ok)
		host, p, err := net.SplitHostPort(sf.Listen)
		require.NoError(t, err)
		assert.Equal(t, "10.1.2.3", host, "the pod's IP, where Prometheus and the kubelet reach it")
		assert.Equal(t, strconv.Itoa(int(port.ContainerPort)), p, "--listen's port is the container's")

		ann := ds.Spec.Template.Annotations
		assert.Equal(t, "true", ann["prometheus.io/scrape"])
		assert.Equal(t, p, ann["prometheus.io/port"])
		assert.Equal(t, "/metrics", ann["prometheus.io/path"])

		require.Len(t, svc.Spec.Ports, 1)
		sp := svc.Spec.Ports[0]
		assert.Equal(t, port.ContainerPort, sp.Port)
		assert.Equal(t, intstr.FromString(port.Name), sp.TargetPort, "the Service targets the container port by name")
		for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if assert.NotNil(t, probe) && assert.NotNil(t, probe.HTTPGet) {
				assert.Equal(t, intstr.FromString(port.Name), probe.HTTPGet.Port)
			}
		}
	})
}

// dockerfileStage is one FROM ... stage of a Dockerfile: its base image and
// its instructions (keyword upper-cased, continuation lines joined).
type dockerfileStage struct {
	from  string
	lines [][2]string
}

func readDockerfile(t *testing.T, path string) (args map[string]string, stages []dockerfileStage) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	args = map[string]string{}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kw, rest, _ := strings.Cut(line, " ")
		kw, rest = strings.ToUpper(kw), strings.TrimSpace(rest)
		switch {
		case kw == "FROM":
			stages = append(stages, dockerfileStage{from: rest})
		case len(stages) == 0 && kw == "ARG":
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case len(stages) == 0:
			t.Fatalf("%s: %s before FROM", path, kw)
		default:
			s := &stages[len(stages)-1]
			s.lines = append(s.lines, [2]string{kw, rest})
		}
	}
	return args, stages
}

// TestDeployDockerfile reads the image's Dockerfile: a Debian image (glibc:
// the release binary needs 2.17 or newer, TestReleaseInstall), the Go image
// of go.mod's Go version, the binary make release writes, and
// a default command serve's flag parser accepts, on the port it exposes.
func TestDeployDockerfile(t *testing.T) {
	args, stages := readDockerfile(t, dockerfileFile)
	require.Len(t, stages, 2, "a build stage and the image")
	build, image := stages[0], stages[1]

	gomod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	require.NotNil(t, goVersion)
	assert.Equal(t, string(goVersion[1]), args["GO_VERSION"], "the Go image is go.mod's Go version")

	codename := regexp.MustCompile(`(bookworm|trixie|bullseye)`)
	assert.Equal(t, "golang:${GO_VERSION}-bookworm AS build", build.from)
	assert.NotEmpty(t, codename.FindString(image.from), "the image is a Debian release's, with glibc: %s", image.from)

	var release, copied string
	for _, l := range build.lines {
		if l[0] == "RUN" && strings.HasPrefix(l[1], "make release ") {
			release = l[1]
		}
	}
	require.NotEmpty(t, release, "the build stage runs make release")
	dir := outDir(release)
	require.NotEmpty(t, dir, "make release RELEASE=DIR")

	var entrypoint, cmd []string
	var expose string
	for _, l := range image.lines {
		switch l[0] {
		case "COPY":
			if strings.HasPrefix(l[1], "--from=build ") {
				copied = l[1]
			}
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(l[1]), &entrypoint), "ENTRYPOINT in exec form")
		case "CMD":
			require.NoError(t, json.Unmarshal([]byte(l[1]), &cmd), "CMD in exec form")
		case "EXPOSE":
			expose = l[1]
		}
	}
	require.Len(t, entrypoint, 1)
	assert.Equal(t, fmt.Sprintf("--from=build %s/vramprof %s", dir, entrypoint[0]), copied, "the image runs the binary make release built")
	assert.Equal(t, defaultPort, expose)

	require.NotEmpty(t, cmd)
	parsed, err := parseCommand(cmd[0], cmd[1:])
	require.NoError(t, err, "CMD %q", cmd)
	sf, ok := parsed.(*serveFlags)
	require.True(t, ok, "CMD runs serve")
	_, p, err := net.SplitHostPort(sf.Listen)
	require.NoError(t, err)
	assert.Equal(t, expose, p)

	// The build stage's make line, run by sh as docker runs it, in this
	// checkout (its output folder moved to a temporary one): the build
	// arguments reach the binary, and unset ones leave the Makefile's
	// defaults (an empty VERSION= would stamp an empty version).
	t.Run("build args", func(t *testing.T) {
		out := t.TempDir()
		line := strings.Replace(release, "RELEASE="+outDir(release), "RELEASE="+out, 1)
		sh := func(env []string, line string) string {
			cmd := exec.Command("sh", "-c", line)
			cmd.Dir = repoRoot
			cmd.Env = append(os.Environ(), env...)
			b, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s:\n%s", line, b)
			return string(b)
		}
		sh([]string{"VERSION=2.0.0-image", "COMMIT=feedface"}, line)
		v, err := exec.Command(filepath.Join(out, "vramprof"), "--version").Output()
		require.NoError(t, err)
		assert.Equal(t, "vramprof 2.0.0-image (commit feedface)\n", string(v))
		dry := sh(nil, strings.Replace(line, "make release", "make -n release", 1))
		assert.Contains(t, dry, "-X main.version="+version+" ", "VERSION unset: main.go's")
	})

	ignore, err := os.ReadFile(dockerfileFile + ".dockerignore")
	require.NoError(t, err)
	assert.Contains(t, strings.Fields(string(ignore)), "bin/", "no local build in the context")
}

// capNumbers are linux/capability.h's numbers of the capabilities a unit
// may keep here.
var capNumbers = map[string]uint{"CAP_KILL": 5, "CAP_SYS_PTRACE": 19, "CAP_SYS_RESOURCE": 24, "CAP_PERFMON": 38, "CAP_BPF": 39}

// assertCapBounding checks that process pid runs as the unit says: its
// bounding set is exactly caps, and no new privileges.
func assertCapBounding(t *testing.T, pid int, caps []string) {
	t.Helper()
	var want uint64
	for _, c := range caps {
		n, ok := capNumbers[c]
		require.True(t, ok, "capability %s: add its number to capNumbers", c)
		want |= 1 << n
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fields[k] = strings.TrimSpace(v)
	}
	assert.Equal(t, fmt.Sprintf("%016x", want), fields["CapBnd"], "serve's bounding set")
	assert.Equal(t, "1", fields["NoNewPrivs"])
}

// outDir is the RELEASE=DIR folder of a make release line.
func outDir(line string) string {
	m := regexp.MustCompile(`RELEASE=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return m[1]
}

// unitDirectives are a unit file's directives by name (the last one wins,
// as in systemd for the ones read here).
func unitDirectives(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	d := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q is no directive", path, line)
		d[k] = v
	}
	return d
}

// unitCommand is the unit's ExecStart split into words, with no quoting
// (systemd's quoting is not needed by it, so not parsed here).
func unitCommand(t *testing.T, d map[string]string) []string {
	t.Helper()
	exec := d["ExecStart"]
	require.NotContains(t, exec, `"`, "ExecStart without quotes")
	require.NotContains(t, exec, `'`, "ExecStart without quotes")
	argv := strings.Fields(exec)
	require.NotEmpty(t, argv)
	require.Equal(t, unitBinary, argv[0], "make install rewrites this path to the installed binary")
	return argv
}

// TestDeployUnitVerify runs systemd-analyze verify on the unit, its
// ExecStart naming the binary under test (verify checks it is there).
func TestDeployUnitVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is missing (package systemd; .ci/run installs it)")
		}
		t.Skip("systemd-analyze is missing (package systemd)")
	}
	data, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	dir := t.TempDir()
	unit := filepath.Join(dir, "vramprof.service")
	write := func(content string) {
		require.NoError(t, os.WriteFile(unit, []byte(content), 0o644))
	}
	write(strings.Replace(string(data), "ExecStart="+unitBinary+" ", "ExecStart="+binPath+" ", 1))
	out, err := exec.Command(sa, "verify", unit).CombinedOutput()
	assert.NoError(t, err, "systemd-analyze verify:\n%s", out)
	assert.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify has no complaint")

	// The same check fails on a unit that names no binary: verify is
	// checking something.
	write(string(data))
	if _, err := os.Stat(unitBinary); errors.Is(err, os.ErrNotExist) {
		out, err = exec.Command(sa, "verify", unit).CombinedOutput()
		assert.Error(t, err, "verify accepts a missing binary")
		assert.Contains(t, string(out), unitBinary)
	}
}

// TestDeployUnitServes runs the unit's ExecStart as systemd would: the
// binary under test in place of the installed one, a free loopback port in
// place of the default one, within the unit's CapabilityBoundingSet and
// with NoNewPrivileges (setpriv). It must trace a CUDA program (longrun)
// with those capabilities alone, its figures on /metrics equal to the
// program's truth, and stop cleanly on SIGTERM, systemd's stop signal.
// Like TestServe, it traces every CUDA process on the host for its few
// seconds; only longrun's PID is looked at.
func TestDeployUnitServes(t *testing.T) {
	probetest.RequirePrivilege(t)
	setpriv, err := exec.LookPath("setpriv")
	require.NoError(t, err, "setpriv (util-linux) sets the unit's capability bounding set")
	d := unitDirectives(t, unitFile)
	argv := unitCommand(t, d)
	require.Equal(t, "yes", d["NoNewPrivileges"])
	require.Equal(t, "root", d["User"])

	// CapabilityBoundingSet=CAP_BPF CAP_PERFMON ... -> -all,+bpf,+perfmon,...
	bounding := "-all"
	caps := strings.Fields(d["CapabilityBoundingSet"])
	require.NotEmpty(t, caps)
	for _, c := range caps {
		require.True(t, strings.HasPrefix(c, "CAP_"), "capability %q", c)
		bounding += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}

	addr := freeLoopback(t)
	args := append([]string{}, argv[1:]...)
	replaced := false
	for i := range args {
		if args[i] == "--listen" && i+1 < len(args) {
			_, p, err := net.SplitHostPort(args[i+1])
			require.NoError(t, err)
			assert.Equal(t, defaultPort, p, "the unit serves on the default port")
			args[i+1], replaced = addr, true
		}
	}
	require.True(t, replaced, "ExecStart gives --listen")

	// Series per process (opt-in; the unit's default groups them), so
	// longrun's own figures can be read against its truth.
	args = append(args, "--per-process")
	lr := startLongrun(t)
	cmd := exec.Command(setpriv, append([]string{"--bounding-set=" + bounding, "--inh-caps=-all", "--no-new-privs", "--", binPath}, args...)...)
	sv := startDeployedServe(t, cmd, "http://"+addr)
	assertCapBounding(t, cmd.Process.Pid, caps) // setpriv exec'd serve in place
	sv.tracesLongrun(t, lr)
	sv.stop(t)
}

// deployedServe is serve started as a deploy file says, answering.
type deployedServe struct {
	cmd  *exec.Cmd
	base string     // its URL
	done chan error // cmd.Wait's result
}

// startDeployedServe starts cmd, a serve with -q, and waits until base/
// answers (the probes' path: answered once the probes are loaded).
func startDeployedServe(t *testing.T, cmd *exec.Cmd, base string) *deployedServe {
	t.Helper()
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	sv := &deployedServe{cmd: cmd, base: base, done: make(chan error, 1)}
	go func() { sv.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return sv
			}
		}
		select {
		case err := <-sv.done:
			t.Fatalf("serve exited before answering: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "serve never answered")
		time.Sleep(50 * time.Millisecond)
	}
}

// tracesLongrun lets lr run its traced phase and waits until serve's
// /metrics carries lr's truth: its allocations, frees and live bytes.
func (sv *deployedServe) tracesLongrun(t *testing.T, lr *longrun) {
	t.Helper()
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	truth := probetest.MustReadTruth(t, lr.truth)
	pid := strconv.Itoa(lr.pid)
	deadline := time.Now().Add(15 * time.Second)
	for {
		fams := scrapeMetrics(t, sv.base)
		allocs, _ := metricValue(fams, exporter.MetricAllocations, pid)
		frees, _ := metricValue(fams, exporter.MetricFrees, pid)
		if allocs == float64(truth.Totals.Allocations) && frees == float64(truth.Totals.Frees) {
			live, ok := metricValue(fams, exporter.MetricLiveBytes, pid)
			assert.True(t, ok)
			assert.Equal(t, float64(truth.Totals.LiveBytesAtEnd), live)
			return
		}
		require.True(t, time.Now().Before(deadline), "pid %d: %v allocations and %v frees on /metrics, truth %d and %d",
			lr.pid, allocs, frees, truth.Totals.Allocations, truth.Totals.Frees)
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends serve SIGTERM (systemd's and the kubelet's stop signal) and
// requires a clean exit.
func (sv *deployedServe) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, sv.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-sv.done:
		assert.NoError(t, err, "serve's exit on SIGTERM")
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
}
