package lb

// The compiled objects and their Go bindings are committed, so building
// xlb needs no clang. `make generate` re-runs this; CI checks the result
// is current. The include path is the multiarch one of Debian's
// linux-libc-dev (asm/types.h); -fdebug-prefix-map keeps the build
// directory out of the objects so they are identical on every machine.
// The Go types of the maps' keys and values are internal/dataplane/wire's
// (-no-global-types): one generated definition of each.
//go:generate go tool bpf2go -tags linux,!xlbupgradetest -target bpfel -no-global-types lb ../../../bpf/xlb_lb.c -- -O2 -mcpu=v3 -g -Wall -Werror -I../../../bpf -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=../../../bpf=bpf
//
// The same program with different bytecode and the same maps, for the
// upgrade test (test/e2e): `go build -tags xlbupgradetest` embeds it.
//go:generate go tool bpf2go -tags linux,xlbupgradetest -output-stem lb_upgradetest -target bpfel -no-global-types lb ../../../bpf/xlb_lb.c -- -O2 -mcpu=v3 -g -Wall -Werror -I../../../bpf -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=../../../bpf=bpf -DXLB_UPGRADE_VARIANT
