package bare

//go:generate go tool bpf2go -tags linux -target amd64 -output-dir . -output-stem bpf bpf ../../../bpf/bare.bpf.c -- -I../../../bpf/include -Wall -Werror
