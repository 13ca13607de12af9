package lbharness

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// progRunAttr is the BPF_PROG_TEST_RUN member of union bpf_attr. cilium/
// ebpf's Benchmark takes no context, and the LB program needs one: its
// FIB lookup starts from the ingress interface.
type progRunAttr struct {
	progFD      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      uint64
	dataOut     uint64
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       uint64
	ctxOut      uint64
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

const bpfProgTestRun = 10 // BPF_PROG_TEST_RUN

// testRunXDP runs an XDP program repeat times on frame arriving on
// ifindex and returns its verdict, the kernel's mean time per run in
// nanoseconds, and the frame as the last run left it.
func testRunXDP(progFD int, frame []byte, ifindex uint32, repeat uint32) (uint32, uint32, []byte, error) {
	out := make([]byte, len(frame)+256)
	ctx := [6]uint32{0, uint32(len(frame)), 0, ifindex, 0, 0}
	attr := progRunAttr{
		progFD:      uint32(progFD),
		dataSizeIn:  uint32(len(frame)),
		dataSizeOut: uint32(len(out)),
		dataIn:      uint64(uintptr(unsafe.Pointer(&frame[0]))),
		dataOut:     uint64(uintptr(unsafe.Pointer(&out[0]))),
		repeat:      repeat,
		ctxSizeIn:   uint32(unsafe.Sizeof(ctx)),
		ctxIn:       uint64(uintptr(unsafe.Pointer(&ctx[0]))),
	}
	// A long run is cut short by any signal, and the Go runtime signals
	// its threads (preemption): run again, a bounded number of times.
	var errno unix.Errno
	for try := 0; try < 100; try++ {
		_, _, errno = unix.Syscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if errno != unix.EINTR {
			break
		}
	}
	runtime.KeepAlive(frame)
	runtime.KeepAlive(out)
	runtime.KeepAlive(&ctx)
	if errno != 0 {
		return 0, 0, nil, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
	}
	return attr.retval, attr.duration, out[:attr.dataSizeOut], nil
}
