package lbharness

// The benchmark programs (bpf/bench_floors.c: the LB path of
// bpf/xlb_lb.h and its floors, each wrapped for BPF_PROG_TEST_RUN) are
// committed like the product's objects, with the flags of
// internal/dataplane's: `make generate` builds them, `make
// check-generated` checks them.
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types bench ../../../bpf/bench_floors.c -- -O2 -mcpu=v3 -g -Wall -Werror -I../../../bpf -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=../../../bpf=bpf
