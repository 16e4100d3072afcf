# vramprof: the single entry point for building, testing and running.
#
#   make demo      build everything and profile the bundled demo trainer
#   make test      unit tests and the root-only BPF integration tests
#   make bench     overhead of the probes, as ratios from one run; the findings corpus table
#   make generate  rebuild the BPF objects (committed; reproducible byte for byte)
#   make lint      gofmt, clang-format (bpf/), go vet, staticcheck, a non-Linux cross-build
#   make release   the reproducible release binaries, version and commit stamped
#   make install   install it (PREFIX, DESTDIR) with its systemd unit
#   make image     the container image of `vramprof serve` (docker)

GO       ?= go
BIN      := bin/vramprof
DEMO_OUT ?= demo-out
# BPF tests need root; sudo is used when we are not root already.
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo -E)

.PHONY: all build testdata pythons nvidia torch kube imagebase generate test race bench demo lint clean release install uninstall image

all: build

build: testdata
	$(GO) build -o $(BIN) ./cmd/vramprof

testdata:
	$(MAKE) -s -C testdata

generate:
	$(GO) generate ./probes/...

# -p 1: packages one at a time. attach --all (cmd/vramprof) adopts every CUDA
# process on the machine, other packages' test processes included, and two
# sessions resuming the same stopped process race each other.
test: testdata pythons nvidia torch kube imagebase
	$(SUDO) env "PATH=$$PATH" $(GO) test -p 1 -count=1 -timeout 30m ./...

# The race detector on every package whose tests load no BPF (the
# exporter, the analysis, the reports), and on the probes package's
# concurrent parts that need none: the ring reader, the reorder buffer and
# the process table. .ci/run runs it beside make test.
RACE_PKGS = $(shell $(GO) list ./... | grep -v -e '/cmd/vramprof$$' -e '/probes$$')
race: testdata pythons nvidia torch
	$(GO) test -race -p 1 -count=1 -timeout 30m $(RACE_PKGS)
	$(GO) test -race -count=1 -run '^Test(Reader|Reorder|ProcTable)' ./probes

# The interpreters the Python stack tests run besides the machine's own:
# Debian's newer CPythons and a CPython 3.11 built with frame pointers
# (minutes the first time; kept under testdata/python/build); and Debian's
# pytest for the machine's python3 when it has none (check's per-test
# tests; unpacked there too, nothing installed). Fetched here,
# outside any test's time limit. A failure is left to the tests: they fail
# with CI=true and skip otherwise.
pythons:
	-testdata/python/fetch.sh >/dev/null
	-testdata/python/fp/build.sh >/dev/null
	-testdata/python/pytest/fetch.sh >/dev/null

# NVIDIA's real runtime (shared and static) and NVML from Debian's non-free
# section, for the no-driver tests: about 800 MB downloaded once (the static
# runtime comes in nvidia-cuda-dev, 774 MB, of which 15 MB are kept), kept
# under testdata/nvidia/build. Fetched here, outside any test's time limit; a
# failure is left to the tests, as for the Pythons.
nvidia:
	-testdata/nvidia/fetch.sh >/dev/null
	-testdata/nvidia/fetch.sh static >/dev/null

# PyTorch's real caching allocator (libc10_cuda.so, PyTorch 2.6.0) from
# Debian trixie's contrib section, the c10 headers and trixie's glibc and
# libstdc++ it needs, then testdata/torch/build/bin/torchdrv built against
# them: about 500 MB downloaded once (481 MB of it libtorch-cuda-2.6, of
# which 1.4 MB are kept; 10 MB of package indices), 10 MB kept under
# testdata/torch/build besides the indices. A failure is left to the tests, as
# for the Pythons.
torch: testdata
	-testdata/torch/fetch.sh >/dev/null && $(MAKE) -s -C testdata/torch

# Kubernetes' OpenAPI document (the release of go.mod's k8s.io/api) and
# kubeconform, through the Go module proxy, for the deploy manifests'
# schema test: about 22 MB downloaded once, kept under testdata/kube/build.
# A failure is left to the test, as for the Pythons.
kube:
	-testdata/kube/fetch.sh >/dev/null

# The base of the deploy image (cmd/vramprof/deploy/Dockerfile's FROM
# debian:<codename>-slim) built from Debian's packages with mmdebstrap, for
# the test that runs the image as the DaemonSet does: about 45 MB downloaded
# once, kept under testdata/image/build. A failure is left to the test.
imagebase:
	-$(SUDO) testdata/image/rootfs.sh $$(sed -n 's/^FROM debian:\(.*\)-slim$$/\1/p' cmd/vramprof/deploy/Dockerfile) >/dev/null

# Probe overhead (unprobed vs bare counting probe vs vramprof, one run,
# interleaved) for the CUDA API and for the block layer (--pool), with the BPF
# run time per hit of call_enter, call_return and usdt_block against the bare
# probe's at the same points (kernel BPF stats) and the hits per pair, and attach
# latency on a process with 400 mapped libraries. First, no root needed: the
# trace's bytes per event, format 1 as the scenarios recorded it against the
# current format (a table per scenario), and replay speed (events/s); the
# analyser's heap per live allocation (1M live, B/live-alloc) and its speed
# (events/s); a snapshot import's peak heap per file byte.
bench: build
	$(GO) test -run '^$$' -bench '^(BenchmarkTraceSize|BenchmarkReplay)$$' -benchtime 3x -count 1 ./probes/event/
	$(GO) test -run '^$$' -bench '^(BenchmarkLiveMemory|BenchmarkAnalyze)$$' -benchtime 1x -count 1 ./analysis/
	$(GO) test -run '^$$' -bench '^BenchmarkImportMemory$$' -benchtime 1x -count 1 ./profile/snapshot/
	# The reader's CPU per event (ring buffer sample to trace record), against its 300 ns budget; no BPF.
	$(GO) test -run '^$$' -bench '^BenchmarkReader$$' -benchtime 2000000x -count 1 ./probes/
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -bench '^BenchmarkOverhead$$' -benchtime 20000x -count 1 ./probes/
	# Context calls around every allocation and free (a device guard): probe hits and records per pair.
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -bench GuardOverhead -benchtime 20000x -count 1 ./probes/
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -bench ThreadsOverhead -benchtime 2000x -count 1 ./probes/
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -bench PythonOverhead -benchtime 20000x -count 1 ./probes/
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -bench PoolOverhead -benchtime 100000x -count 1 ./probes/
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -bench Attach -benchtime 5x -count 1 ./probes/
	# The findings corpus's tables (kind | TP | FP | miss, each program's label against its findings),
	# on the fake allocator and on PyTorch's libc10_cuda.so (make torch); the tests proper (make test)
	# assert the bar, this prints the figures.
	t=$$(mktemp) && $(SUDO) env "PATH=$$PATH" VRAMPROF_CORPUS_TABLE=$$t $(GO) test -count 1 \
		-run '^TestFindingsCorpus(Torch)?$$' ./cmd/vramprof/ && \
		cat $$t; rc=$$?; rm -f $$t; exit $$rc

# The demo's NVML is the stand-in libnvidia-ml.so.1 (testdata/nvml), found
# through LD_LIBRARY_PATH, which reads the fake driver's state from a
# directory of its own: an 80 GiB H100 whose figures are the run's.
demo: build
	rm -rf $(DEMO_OUT)
	d=$$(mktemp -d) && $(SUDO) env LD_LIBRARY_PATH=$(CURDIR)/testdata/build/nvml FAKECUDA_NVML_DIR=$$d \
		FAKECUDA_CAPACITY=85899345920 ./$(BIN) run -o $(DEMO_OUT) -- testdata/build/bin/demo; \
		rc=$$?; rm -rf $$d; exit $$rc

# BPF_SOURCES: bpf/'s own C (bpf/.clang-format's style); bpf/include is
# vendored (libbpf's headers, a compact vmlinux.h) and keeps its own.
BPF_SOURCES = $(shell git ls-files 'bpf/*.c' 'bpf/*.h' ':!bpf/include/*')

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	@command -v clang-format >/dev/null || { echo "lint: clang-format not found: apt-get install clang-format (.ci/run installs it)"; exit 1; }
	clang-format --dry-run -Werror $(BPF_SOURCES)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) tool go-errorlint ./...
	GOOS=darwin $(GO) build ./...

# The release binaries, $(RELEASE)/vramprof and $(RELEASE)/vramprof-static:
# the same bytes from the same source, VERSION and COMMIT wherever they are
# built (-trimpath; -buildvcs=false, so that a source tarball without .git
# builds what a checkout does: the commit is stamped with -X instead).
# `vramprof --version` prints both. VERSION is main.go's unless given; COMMIT
# is the checkout's HEAD, with -dirty when tracked files differ from it, and
# "unknown" without git.
#
# vramprof, the one to install, needs cgo (NVML through go-nvml, and
# probes/sigstate's constructor), and go-nvml binds NVML's functions through
# the dynamic linker when it dlopens libnvidia-ml.so.1, which a static glibc
# binary has not: a -extldflags -static build crashes (SIGSEGV at address 0
# in nvmlInit_v2) as soon as the library is there, on every GPU node. So it
# is dynamically linked, to glibc alone, and against an old one: Debian 11's
# glibc 2.31 (SYSROOT, which cmd/vramprof/release/sysroot.sh fetches and
# checks), so that it asks for no symbol version newer than GLIBC_2.3.2 and
# runs on any glibc system NVML runs on (linked against this machine's glibc
# it would need 2.34). SYSROOT= links against this machine's glibc instead.
# Go's own resolver and user lookup (netgo, osusergo), not glibc's NSS.
#
# vramprof-static is built without cgo: no dynamic linker, no library at
# all, for hosts and images without glibc (Alpine, distroless/static). It
# traces what vramprof traces; it has no NVML (device figures), and of the
# signals its parent ignored it passes on to `run`'s command only SIGHUP and
# SIGINT (README.md, "Install").
RELEASE ?= bin/release
SYSROOT ?= bin/sysroot
VERSION ?= $(shell sed -n 's/^[[:space:]]*version = "\(.*\)"$$/\1/p' cmd/vramprof/main.go)
COMMIT  ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null || c=$$c-dirty; echo $$c; })
RELEASE_LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
RELEASE_FLAGS   := -trimpath -buildvcs=false -tags netgo,osusergo -ldflags '$(RELEASE_LDFLAGS)'
# gcc looks for crt1.o and libraries beside itself before the sysroot: -B
# and -L put the sysroot's first. The sysroot's own path is mapped out of
# the debug information, so that it may be anywhere.
RELEASE_SYSROOT  = $(abspath $(SYSROOT))
RELEASE_CC       = $(if $(SYSROOT),$(or $(CC_FOR_RELEASE),gcc) --sysroot=$(RELEASE_SYSROOT) \
	-B$(RELEASE_SYSROOT)/usr/lib/x86_64-linux-gnu -L$(RELEASE_SYSROOT)/usr/lib/x86_64-linux-gnu \
	-L$(RELEASE_SYSROOT)/lib/x86_64-linux-gnu -ffile-prefix-map=$(RELEASE_SYSROOT)=/sysroot,$(or $(CC_FOR_RELEASE),gcc))

release:
	$(if $(SYSROOT),cmd/vramprof/release/sysroot.sh $(SYSROOT) >/dev/null)
	CC="$(RELEASE_CC)" CGO_ENABLED=1 $(GO) build $(RELEASE_FLAGS) -o $(RELEASE)/vramprof ./cmd/vramprof
	CGO_ENABLED=0 $(GO) build $(RELEASE_FLAGS) -o $(RELEASE)/vramprof-static ./cmd/vramprof

# Packagers' conventions: PREFIX (default /usr/local), DESTDIR staged. The
# unit goes where systemd looks for units under PREFIX
# ($(PREFIX)/lib/systemd/system: /usr/lib/... for a package, /usr/local/lib/...
# by hand), its ExecStart naming the installed binary.
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system

install: release
	install -D -m 0755 $(RELEASE)/vramprof $(DESTDIR)$(BINDIR)/vramprof
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed 's|^ExecStart=/usr/local/bin/vramprof |ExecStart=$(BINDIR)/vramprof |' \
		cmd/vramprof/deploy/vramprof.service >$(DESTDIR)$(UNITDIR)/vramprof.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/vramprof.service

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/vramprof $(DESTDIR)$(UNITDIR)/vramprof.service

# The image cmd/vramprof/deploy/kubernetes.yaml runs: push it and set the
# DaemonSet's image to it.
IMAGE ?= vramprof:$(VERSION)

image:
	docker build -f cmd/vramprof/deploy/Dockerfile --build-arg VERSION=$(VERSION) \
		--build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

clean:
	rm -rf bin $(DEMO_OUT)
	$(MAKE) -s -C testdata clean
	$(MAKE) -s -C testdata/torch clean
