package decap

// The compiled object and its Go bindings are committed, as the LB's are
// (internal/dataplane/lb/gen.go has the flags' reasons).
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types backend ../../../bpf/xlb_backend.c -- -O2 -mcpu=v3 -g -Wall -Werror -I../../../bpf -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=../../../bpf=bpf
