module github.com/vramprof/vramprof

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.43.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

tool github.com/cilium/ebpf/cmd/bpf2go
