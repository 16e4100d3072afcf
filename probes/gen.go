package probes

//go:generate go tool bpf2go -tags linux -target amd64 -type record -type thread -type shape -type rec_kind -type rec_flags -type usdt_spec -type usdt_arg_kind -type py_proc -type py_codes -type spec_flags -type call_flags -type ret_flags -type stop -type file_key -type known -output-dir . -output-stem bpf bpf ../bpf/vramprof.bpf.c -- -I../bpf/include -Wall -Werror
