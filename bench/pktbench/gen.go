package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/netns"
)

// Frame layout of the generated packets: Ethernet, IPv4 without
// options, UDP, and a payload that pads the frame to the Ethernet
// minimum of 60 bytes (64 on the wire with the FCS).
const (
	ethLen       = 14
	ipv4Len      = 20
	udpLen       = 8
	minFrame     = 60
	udpSportOff  = ethLen + ipv4Len // offset of the UDP source port
	udpDportOff  = udpSportOff + 2  // offset of the UDP destination port
	templateTTL  = 64
	ipProtoUDP   = 17
	etherTypeIP4 = 0x0800
)

// Source ports of the generated flows: the program draws each frame's
// port from [sportBase, sportBase+2^sportBits), so the frames spread
// over 2^sportBits flows (ECMP, Maglev, veth queues, conntrack).
const (
	sportBase = 32768
	sportBits = 12
)

// frameSpec says what a generated frame carries.
type frameSpec struct {
	SrcMAC, DstMAC net.HardwareAddr
	Src, Dst       netip.Addr
	Sport, Dport   uint16
}

// udpFrame builds a minimum-size Ethernet/IPv4/UDP frame: IPv4 checksum
// set, UDP checksum 0 (none, allowed over IPv4), payload zero. The
// generator program rewrites only the source port, which neither
// checksum then covers.
func udpFrame(s frameSpec) ([]byte, error) {
	if len(s.SrcMAC) != 6 || len(s.DstMAC) != 6 {
		return nil, fmt.Errorf("MAC addresses %v, %v: want 6 bytes each", s.SrcMAC, s.DstMAC)
	}
	if !s.Src.Is4() || !s.Dst.Is4() {
		return nil, fmt.Errorf("addresses %s, %s: want IPv4", s.Src, s.Dst)
	}
	f := make([]byte, minFrame)
	copy(f[0:6], s.DstMAC)
	copy(f[6:12], s.SrcMAC)
	binary.BigEndian.PutUint16(f[12:14], etherTypeIP4)
	ip := f[ethLen : ethLen+ipv4Len]
	ip[0] = 0x45 // version 4, 5 words of header
	binary.BigEndian.PutUint16(ip[2:4], uint16(minFrame-ethLen))
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // don't fragment
	ip[8] = templateTTL
	ip[9] = ipProtoUDP
	src, dst := s.Src.As4(), s.Dst.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:12], ipChecksum(ip))
	udp := f[udpSportOff : udpSportOff+udpLen]
	binary.BigEndian.PutUint16(udp[0:2], s.Sport)
	binary.BigEndian.PutUint16(udp[2:4], s.Dport)
	binary.BigEndian.PutUint16(udp[4:6], uint16(minFrame-ethLen-ipv4Len))
	return f, nil
}

// ipChecksum is the Internet checksum of an IPv4 header whose checksum
// field is zero.
func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// headerWords is how much of the template the generator program writes
// into every frame: the Ethernet, IPv4 and UDP headers and the first
// payload bytes, whole 8-byte words.
const headerWords = (udpSportOff + udpLen + 7) / 8

// portSlots is the size of a generator's port table: a power of two,
// so that a random number masked to it picks a slot, and as many slots
// as the forward frames have source ports (flows).
const portSlots = 1 << sportBits

// portTable spreads ports over the portSlots slots of a generator's
// table, slot i holding ports[i mod len(ports)], each in network byte
// order: the bytes of the table map's one value. With a number of ports
// that does not divide portSlots, the first portSlots mod len(ports)
// ports get one slot more than the others.
func portTable(ports []uint16) ([]byte, error) {
	if len(ports) == 0 || len(ports) > portSlots {
		return nil, fmt.Errorf("%d destination ports: want 1 to %d", len(ports), portSlots)
	}
	b := make([]byte, 2*portSlots)
	for i := range portSlots {
		binary.BigEndian.PutUint16(b[2*i:], ports[i%len(ports)])
	}
	return b, nil
}

// generatorInsns is the generator's XDP program: write the template's
// headers into the frame, give it a random source port in the generated
// range, count it in the per-CPU array counter (key 0), and return
// XDP_TX. With a port table (tableFD >= 0, an array map whose one value
// is portTable's bytes) it gives the frame a random destination port
// from the table instead and leaves the template's source port: the
// replies of sessions that exist. In a live-frames test run XDP_TX sends
// the frame out of the run's ingress interface. In a live-frames test run XDP_TX sends the frame out of the
// run's ingress interface.
//
// Why it writes the whole header every time: in live-frames mode the
// kernel copies the template into a page once and then reuses the page,
// and the receiving stack rewrites the frame in place on the way (MAC
// addresses at every hop, TTL and checksum at every router). Without the
// rewrite only the first frames of each page reach the backend
// (measured: 128 of 32768).
func generatorInsns(frame []byte, counterFD, tableFD int) (asm.Instructions, error) {
	const xdpDrop, xdpTX = 1, 3
	if len(frame) < headerWords*8 {
		return nil, fmt.Errorf("frame of %d bytes: want at least %d", len(frame), headerWords*8)
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetPrandomU32.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // ctx->data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // ctx->data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, headerWords*8),
		asm.JGT.Reg(asm.R4, asm.R3, "drop"),
	}
	for i := 0; i < headerWords; i++ {
		w := binary.NativeEndian.Uint64(frame[8*i:])
		insns = append(insns,
			asm.LoadImm(asm.R5, int64(w), asm.DWord),
			asm.StoreMem(asm.R2, int16(8*i), asm.R5, asm.DWord))
	}
	if tableFD < 0 {
		insns = append(insns,
			asm.And.Imm(asm.R7, 1<<sportBits-1),
			asm.Add.Imm(asm.R7, sportBase),
			asm.HostTo(asm.BE, asm.R7, asm.Half),
			asm.StoreMem(asm.R2, udpSportOff, asm.R7, asm.Half))
	} else {
		// The table's slot is read straight from the map's value (no
		// helper call); the mask bounds the offset for the verifier.
		insns = append(insns,
			asm.And.Imm(asm.R7, portSlots-1),
			asm.LSh.Imm(asm.R7, 1),
			asm.LoadMapValue(asm.R1, tableFD, 0),
			asm.Add.Reg(asm.R1, asm.R7),
			asm.LoadMem(asm.R7, asm.R1, 0, asm.Half),
			asm.StoreMem(asm.R2, udpDportOff, asm.R7, asm.Half))
	}
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, counterFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.StoreImm(asm.R2, 0, 0, asm.Word),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "tx"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpTX).WithSymbol("tx"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpDrop).WithSymbol("drop"),
		asm.Return(),
	)
	return insns, nil
}

// generator is the loaded generator program, its counter and its port
// table (nil without one).
type generator struct {
	prog    *ebpf.Program
	counter *ebpf.Map
	table   *ebpf.Map
}

// newGenerator loads a generator program for frame (see udpFrame). With
// dports it draws each frame's destination port from them (see
// portTable); without, its source port from the generated range.
func newGenerator(frame []byte, dports []uint16) (g *generator, err error) {
	g = &generator{}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if g.counter, err = ebpf.NewMap(&ebpf.MapSpec{Name: "xpb_sent", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}); err != nil {
		return nil, fmt.Errorf("generator counter map: %w", err)
	}
	tableFD := -1
	if dports != nil {
		b, err := portTable(dports)
		if err != nil {
			return nil, err
		}
		if g.table, err = ebpf.NewMap(&ebpf.MapSpec{Name: "xpb_ports", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(len(b)), MaxEntries: 1}); err != nil {
			return nil, fmt.Errorf("generator port table map: %w", err)
		}
		if err := g.table.Put(uint32(0), b); err != nil {
			return nil, fmt.Errorf("generator port table: %w", err)
		}
		tableFD = g.table.FD()
	}
	insns, err := generatorInsns(frame, g.counter.FD(), tableFD)
	if err != nil {
		return nil, err
	}
	if g.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "xpb_gen", Type: ebpf.XDP, License: "GPL", Instructions: insns}); err != nil {
		return nil, fmt.Errorf("generator program: %w", err)
	}
	return g, nil
}

func (g *generator) Close() {
	if g.prog != nil {
		g.prog.Close()
	}
	for _, m := range []*ebpf.Map{g.counter, g.table} {
		if m != nil {
			m.Close()
		}
	}
}

// sent is the number of frames the program has sent, over all CPUs.
func (g *generator) sent() (uint64, error) {
	var per []uint64
	if err := g.counter.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("generator counter: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// sendResult is what a send did.
type sendResult struct {
	Sent    uint64        // frames the program sent (its counter)
	Elapsed time.Duration // wall time from the first test run to the last one's end
	Calls   int           // test runs (system calls), over all threads
	// ThreadCPU is each generator thread's CPU time (user and system)
	// while it sent: the program, the transmission, and the softirq
	// work that ran in the thread's context when it re-enabled bottom
	// halves after each batch (the receiving veth's NAPI and everything
	// it set off: bridge, routing, the node, the backend).
	ThreadCPU []time.Duration
}

// liveFramesCtx is struct xdp_md as a test run takes it: only the
// ingress interface (and its queue) matter.
type liveFramesCtx struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// sendOpts says how to send.
type sendOpts struct {
	NS, Ifname string
	// CPUs has one entry per generator thread: the CPU it is pinned to.
	CPUs  []int
	Count uint64 // frames to send, over all threads
	// MaxChunk is the most repetitions of one test run: a thread
	// checks the counter, the deadline and ctx between runs. A run
	// asks for its share of what is left, within [minChunk, MaxChunk].
	MaxChunk uint32
	Deadline time.Time
}

// minChunk is the fewest repetitions of a test run. Every live-frames
// run costs the calling thread about 25 ms of waiting besides its work
// (measured here: with 16384 frames per run, CPU 0 was idle a quarter of
// the time and nothing else ran), so runs are made as long as the count
// allows.
const minChunk = 4096

// chunk is the repetitions of the next test run of one of threads
// threads, with left frames still to send.
func chunk(left uint64, threads int, most uint32) uint32 {
	share := left / uint64(max(threads, 1))
	return uint32(min(max(share, minChunk), uint64(max(most, minChunk))))
}

// send sends frames out of o.Ifname in namespace o.NS from one thread
// per entry of o.CPUs, each pinned to its CPU, until the program's
// counter has grown by o.Count, the deadline passes or ctx ends. The
// kernel may run a test run more often than asked (it restarts one that
// a signal interrupted), so the counter, not the repetitions, says what
// was sent.
func (g *generator) send(ctx context.Context, frame []byte, o sendOpts) (sendResult, error) {
	res := sendResult{ThreadCPU: make([]time.Duration, len(o.CPUs))}
	before, err := g.sent()
	if err != nil {
		return res, err
	}
	target := before + o.Count
	start := time.Now()
	errs := make(chan error, len(o.CPUs))
	calls := make([]int, len(o.CPUs))
	for i, cpu := range o.CPUs {
		go func() {
			errs <- netns.Do(o.NS, func() error {
				var set unix.CPUSet
				set.Set(cpu)
				if err := unix.SchedSetaffinity(0, &set); err != nil {
					return fmt.Errorf("pin a generator thread to CPU %d: %w", cpu, err)
				}
				ifc, err := net.InterfaceByName(o.Ifname)
				if err != nil {
					return fmt.Errorf("interface %s in %s: %w", o.Ifname, o.NS, err)
				}
				lf := liveFramesCtx{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifc.Index)}
				cpu0 := threadCPU()
				defer func() { res.ThreadCPU[i] = threadCPU() - cpu0 }()
				n := before
				for ctx.Err() == nil && time.Now().Before(o.Deadline) && n < target {
					if _, err := g.prog.Run(&ebpf.RunOptions{
						Data: frame, Context: lf, Repeat: chunk(target-n, len(o.CPUs), o.MaxChunk),
						Flags: unix.BPF_F_TEST_XDP_LIVE_FRAMES,
					}); err != nil {
						return fmt.Errorf("live-frames test run on CPU %d: %w", cpu, err)
					}
					calls[i]++
					if n, err = g.sent(); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	var all []error
	for range o.CPUs {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	res.Elapsed = time.Since(start)
	for _, c := range calls {
		res.Calls += c
	}
	after, err := g.sent()
	if err != nil {
		all = append(all, err)
	}
	res.Sent = after - before
	return res, errors.Join(all...)
}

// threadCPU is the calling thread's CPU time (user and system).
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
