package exporter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A Kubernetes pod's name and namespace are not in its cgroup path (the
// pod UID and the container ID are: groups.go), but the node's container
// runtime writes them, with the container's name, into the annotations of
// each container's OCI bundle (config.json), on the node, before the
// container's first process runs. Serve reads them there: no API server,
// no credentials. The bundle is found by the container ID in the cgroup
// path, under each of Options.RuntimeDirs:
//
//	<dir>/<ID>/config.json           containerd's v2 shim: /run/containerd/io.containerd.runtime.v2.task/k8s.io
//	<dir>/<ID>/userdata/config.json  CRI-O (containers/storage run root): /run/containers/storage/overlay-containers
//
// and its labels are believed only when the pod UID it carries is the one
// in the cgroup path: a bundle of another pod (a reused ID, a stale
// directory), a malformed one, one without the UID or none at all leave
// pod, namespace and container_name empty, never wrong. Each container's
// bundle is read once, when serve adopts the first of its processes, and
// forgotten when no process held is in that container (Sweep).

// Annotation keys, as the runtimes' sources define them.
//
// containerd's CRI plugin, internal/cri/annotations/annotations.go
// (github.com/containerd/containerd; pkg/cri/annotations before 2.0):
// SandboxName, SandboxNamespace, SandboxUID and ContainerName, set on every
// container's spec by DefaultCRIAnnotations from the pod sandbox's CRI
// metadata (name, namespace, uid) and the container's name.
const (
	containerdPodName       = "io.kubernetes.cri.sandbox-name"
	containerdPodNamespace  = "io.kubernetes.cri.sandbox-namespace"
	containerdPodUID        = "io.kubernetes.cri.sandbox-uid"
	containerdContainerName = "io.kubernetes.cri.container-name"
)

// CRI-O copies the container's CRI labels into its spec's annotations
// (github.com/cri-o/cri-o, internal/factory/container/container.go,
// SpecAddAnnotations: "for k, v := range labels { c.spec.AddAnnotation(k,
// v) }"), and the kubelet labels every container it creates with its pod
// and its own name (github.com/kubernetes/kubernetes,
// pkg/kubelet/types/labels.go: KubernetesPodNameLabel,
// KubernetesPodNamespaceLabel, KubernetesPodUIDLabel,
// KubernetesContainerNameLabel).
const (
	kubeletPodName       = "io.kubernetes.pod.name"
	kubeletPodNamespace  = "io.kubernetes.pod.namespace"
	kubeletPodUID        = "io.kubernetes.pod.uid"
	kubeletContainerName = "io.kubernetes.container.name"
)

// DefaultRuntimeDirs are where containerd (its v2 shim's state, namespace
// k8s.io, the CRI plugin's) and CRI-O (containers/storage's run root with
// the overlay driver) keep their containers' bundles on a node.
var DefaultRuntimeDirs = []string{
	"/run/containerd/io.containerd.runtime.v2.task/k8s.io",
	"/run/containers/storage/overlay-containers",
}

// maxBundle bounds the config.json read: a bundle is tens of KiB (mounts,
// environment, annotations); a larger file is not a runtime's bundle.
const maxBundle = 4 << 20

// podMeta is what a container's bundle says of its pod; zero when it
// cannot be trusted.
type podMeta struct {
	pod, namespace, containerName string
}

// podNames reads and caches the pods of containers (x.mu guards it).
type podNames struct {
	dirs []string
	note func(string) // nil: say nothing
	// byID holds each container's pod (zero when unknown), by container
	// ID: read once per container, kept while a held process is in it.
	byID map[string]podMeta
	// notedDirs is set once the note that no runtime directory is
	// readable was given.
	notedDirs bool
}

// of returns the pod of container id, whose cgroup path says its pod UID
// is podUID: from the cache, else from its bundle (read once).
func (ps *podNames) of(id, podUID string) podMeta {
	if id == "" || podUID == "" || len(ps.dirs) == 0 {
		return podMeta{}
	}
	if m, ok := ps.byID[id]; ok {
		return m
	}
	m, err := readPod(ps.dirs, id, podUID)
	if err != nil {
		ps.noteErr(id, err)
	}
	if ps.byID == nil {
		ps.byID = make(map[string]podMeta)
	}
	ps.byID[id] = m
	return m
}

// noteErr says once why container id's series have no pod: a bundle
// found but not believed, each time (once per container, as it is read
// once); no bundle, only when no runtime directory is there at all (serve
// run without them mounted), and once.
func (ps *podNames) noteErr(id string, err error) {
	if ps.note == nil {
		return
	}
	if !errors.Is(err, errNoBundle) {
		ps.note(err.Error())
		return
	}
	if ps.notedDirs {
		return
	}
	for _, d := range ps.dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return // the runtime is another, or the container is gone
		}
	}
	ps.notedDirs = true
	ps.note(fmt.Sprintf("container %s of a Kubernetes pod: no container runtime directory (%s) to read its pod's name from: "+
		"series carry pod_uid but no pod, namespace or container_name; mount them read-only (README: Fleets) or set --runtime-dirs",
		shortID(id), strings.Join(ps.dirs, ", ")))
}

// keep forgets the containers that live does not hold (x.mu held).
func (ps *podNames) keep(live map[string]bool) {
	for id := range ps.byID {
		if !live[id] {
			delete(ps.byID, id)
		}
	}
}

// errNoBundle: no runtime directory has a bundle for the container.
var errNoBundle = errors.New("no container bundle")

// readPod reads container id's bundle in the first of dirs that has one
// and returns its pod if the bundle's pod UID is podUID (the cgroup
// path's).
func readPod(dirs []string, id, podUID string) (podMeta, error) {
	for _, d := range dirs {
		for _, path := range []string{filepath.Join(d, id, "config.json"), filepath.Join(d, id, "userdata", "config.json")} {
			b, err := readBundle(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return podMeta{}, fmt.Errorf("container %s: %w: its series have no pod, namespace or container_name", shortID(id), err)
			}
			m, err := podFromBundle(b, podUID)
			if err != nil {
				return podMeta{}, fmt.Errorf("container %s: %s: %w: its series have no pod, namespace or container_name", shortID(id), path, err)
			}
			return m, nil
		}
	}
	return podMeta{}, errNoBundle
}

// readBundle reads a bundle's config.json, at most maxBundle bytes.
func readBundle(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxBundle {
		return nil, fmt.Errorf("read %s: larger than %d MiB, not a container bundle", path, maxBundle>>20)
	}
	return b, nil
}

// podFromBundle returns the pod an OCI bundle's config.json names in its
// annotations (containerd's keys, else the kubelet's labels CRI-O copies),
// if the pod UID there is podUID. An error says why it is not believed:
// malformed JSON, no pod UID, another pod's UID, no pod name.
func podFromBundle(b []byte, podUID string) (podMeta, error) {
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return podMeta{}, fmt.Errorf("not an OCI runtime config: %w", err)
	}
	a := spec.Annotations
	var uid string
	var m podMeta
	switch {
	case a[containerdPodUID] != "":
		uid = a[containerdPodUID]
		m = podMeta{pod: a[containerdPodName], namespace: a[containerdPodNamespace], containerName: a[containerdContainerName]}
	case a[kubeletPodUID] != "":
		uid = a[kubeletPodUID]
		m = podMeta{pod: a[kubeletPodName], namespace: a[kubeletPodNamespace], containerName: a[kubeletContainerName]}
	default:
		return podMeta{}, fmt.Errorf("no pod UID annotation (%s or %s)", containerdPodUID, kubeletPodUID)
	}
	if uid != podUID {
		return podMeta{}, fmt.Errorf("pod UID %q, not the cgroup path's %q", uid, podUID)
	}
	if m.pod == "" || m.namespace == "" {
		return podMeta{}, errors.New("no pod name or namespace annotation")
	}
	return m, nil
}

// shortID is a container ID as crictl and kubectl print it: 13 hex.
func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}
