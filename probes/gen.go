package probes

//go:generate go tool bpf2go -tags linux -target amd64 -type record -output-dir . -output-stem bpf bpf ../bpf/vramprof.bpf.c -- -I../bpf/include -Wall -Werror
