package lbharness

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// DecapBenchResult is one backend-program case's cost per packet over
// several rounds.
type DecapBenchResult struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Verdict     string `json:"verdict"`
	// Counters are the decap_stats and chain_stats counters that every
	// repetition moved by one (and no other moved): the path measured.
	Counters []string  `json:"counters"`
	RoundsNs []float64 `json:"rounds_ns"`
	MedianNs float64   `json:"median_ns"`
	MinNs    float64   `json:"min_ns"`
	// NetNs is MinNs less the harness's MinNs.
	NetNs float64 `json:"net_ns"`
}

// DecapBenchConfig sets the size of a backend benchmark run.
type DecapBenchConfig struct {
	Repeat uint32 // BPF_PROG_TEST_RUN repetitions per round
	Rounds int    // rounds, interleaved over the cases
}

// The backend benchmark's namespace: the host's address on veth0, a
// router with a resolved neighbour behind which the previous owner sits
// (so that chaining ends in XDP_TX), and the VIP and the client on lo so
// that a real connection can stand for the one a backend serves.
var (
	dbHost   = netip.MustParseAddr("10.0.1.2")
	dbNode   = netip.MustParseAddr("10.0.1.5")
	dbPrev   = netip.MustParseAddr("10.0.3.7")
	dbVIP    = netip.MustParseAddr("10.99.0.1")
	dbClient = netip.MustParseAddr("10.0.2.2")
)

const (
	dbPort        = 80   // has a listener and the established connection
	dbClosedPort  = 8080 // has no listener
	dbChainWindow = time.Hour
	// decapSaveLen covers every byte the program writes in the cases
	// measured: the Ethernet header it moves (to at most offset 48+14)
	// and, when it chains, the MACs, outer IPv4 and UDP headers and hint.
	decapSaveLen = 64
)

type decapCase struct {
	name, desc string
	frame      []byte
	verdict    uint32
	counters   []string // wire.DecapStatNames and wire.ChainStatNames entries
}

// RunDecapBenchmark measures the backend program (xlb_decap) with
// BPF_PROG_TEST_RUN on the paths a tunnelled TCP packet to a local VIP
// takes: IPIP, GUE without a hint, and GUE with a daisy-chain hint
// delivered to a local connection, chained to the previous owner, or
// (a SYN) delivered without a lookup. It runs in a network namespace of
// its own, removed afterwards, with a real established connection for
// the socket lookup to find. Every repetition of every round must move
// each of the case's counters by one and no other counter, or the run
// fails.
func RunDecapBenchmark(cfg DecapBenchConfig) ([]DecapBenchResult, error) {
	if cfg.Repeat == 0 || cfg.Rounds <= 0 {
		return nil, fmt.Errorf("repeat %d and rounds %d: both must be positive", cfg.Repeat, cfg.Rounds)
	}
	ns := fmt.Sprintf("xlb-bench-decap-%d", os.Getpid())
	if err := benchNS(ns); err != nil {
		return nil, err
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	for _, a := range []netip.Addr{dbVIP, dbClient} {
		if out, err := exec.Command("ip", "-n", ns, "addr", "add", a.String()+"/32", "dev", "lo").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip addr add %v dev lo: %v: %s", a, err, out)
		}
	}

	objs, err := loadDecapBench()
	if err != nil {
		return nil, err
	}
	defer objs.Close()
	// The node that sends the frames and the previous owner are known,
	// as on a host set up for daisy chaining.
	chain := decap.Chain{Window: dbChainWindow, From: []netip.Prefix{netip.PrefixFrom(dbNode, 32)}, To: []netip.Prefix{netip.PrefixFrom(dbPrev, 32)}}
	if err := decap.Configure(objs.coll, []netip.Addr{dbHost}, []netip.Addr{dbVIP}, chain); err != nil {
		return nil, err
	}

	var socks []io.Closer
	defer func() {
		for _, s := range socks {
			s.Close()
		}
	}()
	var cport uint16
	err = netns.Do(ns, func() error {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(dbVIP, dbPort).String())
		if err != nil {
			return err
		}
		socks = append(socks, ln)
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(dbClient, 0)), Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", netip.AddrPortFrom(dbVIP, dbPort).String())
		if err != nil {
			return err
		}
		socks = append(socks, c)
		s, err := ln.Accept()
		if err != nil {
			return err
		}
		socks = append(socks, s)
		cport = uint16(c.LocalAddr().(*net.TCPAddr).Port)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open a connection to the VIP: %w", err)
	}

	now := uint32(time.Now().Unix())
	hint := decapHint(dbPrev, now, now)
	const ack, syn = 0x10, 0x02
	cases := []decapCase{
		{"harness", "save and restore of the packet front around a call of an empty function: the harness cost, subtracted from the others",
			decapFrame(nil, cport, dbPort, ack), xdpVerdictPass, nil},
		{"ipip", "IPIP, TCP ACK to a local VIP: decapsulated",
			decapFrame(nil, cport, dbPort, ack), xdpVerdictPass, []string{"decap_ipip"}},
		{"gue", "GUE without a hint (hlen 0), TCP ACK: decapsulated",
			decapFrame([]byte{0, 4, 0, 0}, cport, dbPort, ack), xdpVerdictPass, []string{"decap_gue"}},
		{"gue_hint_socket", "GUE with a fresh hint, ACK of an established local connection: socket lookup finds it, delivered",
			decapFrame(hint, cport, dbPort, ack), xdpVerdictPass, []string{"decap_gue", "socket"}},
		{"gue_hint_chain", "GUE with a fresh hint, ACK of no local connection, to a port with a listener: socket lookup finds the listener, SYN-cookie check fails, FIB lookup, chained to the previous owner",
			decapFrame(hint, 40001, dbPort, ack), xdpVerdictTX, []string{"chained"}},
		{"gue_hint_chain_nolisten", "the same to a port without a listener: socket lookup finds nothing, FIB lookup, chained",
			decapFrame(hint, 40001, dbClosedPort, ack), xdpVerdictTX, []string{"chained"}},
		{"gue_hint_syn", "GUE with a fresh hint, SYN: delivered without a socket lookup",
			decapFrame(hint, 40002, dbPort, syn), xdpVerdictPass, []string{"decap_gue", "syn"}},
	}

	results := make([]DecapBenchResult, len(cases))
	err = netns.Do(ns, func() error {
		idx, err := benchThread()
		if err != nil {
			return err
		}
		for i, c := range cases {
			// The program itself, unwrapped, once: the wrapper must not
			// change its verdict.
			if c.counters != nil {
				v, _, _, err := testRunXDP(objs.Decap.FD(), c.frame, idx, 1)
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				if v != c.verdict {
					return fmt.Errorf("%s: xlb_decap's verdict is %s, want %s", c.name, xdpVerdictName(v), xdpVerdictName(c.verdict))
				}
			}
			if _, err := objs.runCase(c, idx, 1); err != nil {
				return err
			}
			results[i] = DecapBenchResult{Name: c.name, Description: c.desc, Verdict: xdpVerdictName(c.verdict), Counters: c.counters}
		}
		for r := 0; r < cfg.Rounds; r++ {
			for i, c := range cases {
				t, err := objs.runCase(c, idx, cfg.Repeat)
				if err != nil {
					return err
				}
				results[i].RoundsNs = append(results[i].RoundsNs, float64(t))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range results {
		results[i].MedianNs = median(results[i].RoundsNs)
		results[i].MinNs = slices.Min(results[i].RoundsNs)
		results[i].NetNs = results[i].MinNs - results[0].MinNs
	}
	return results, nil
}

// decapBenchObjects is the backend object with two more programs: the
// benchmark wrapper around xlb_decap and the same wrapper around an
// empty function.
type decapBenchObjects struct {
	coll       *ebpf.Collection
	Decap      *ebpf.Program
	Bench      *ebpf.Program
	Harness    *ebpf.Program
	DecapStats *ebpf.Map
	ChainStats *ebpf.Map
}

func (o *decapBenchObjects) Close() { o.coll.Close() }

// loadDecapBench loads the backend program with its benchmark wrappers.
// The kernel repeats a test run on one buffer, and xlb_decap moves the
// packet start when it delivers and rewrites the headers when it chains:
// from the second repetition on it would see its own output. The wrapper
// (the C one of bench_floors.c, in assembly, with xlb_decap as a
// subprogram of the very bytecode that gets attached) saves the front of
// the packet, calls the program, moves the start back and restores the
// front.
func loadDecapBench() (*decapBenchObjects, error) {
	spec, err := decap.Spec()
	if err != nil {
		return nil, err
	}
	decap := spec.Programs["xlb_decap"]
	if decap == nil {
		return nil, fmt.Errorf("the backend object has no program xlb_decap")
	}
	body := slices.Clone(decap.Instructions)
	fn := btf.FuncMetadata(&body[0])
	if fn == nil {
		return nil, fmt.Errorf("%s has no BTF function information", decap.Name)
	}
	// A static subprogram is verified in its caller's context, exactly as
	// the attached program is.
	static := *fn
	static.Linkage = btf.StaticFunc
	body[0] = btf.WithFuncMetadata(body[0], &static)
	entry := *fn
	entry.Name = "decap_bench"
	spec.Programs["decap_bench"] = &ebpf.ProgramSpec{
		Name: "decap_bench", Type: ebpf.XDP, License: decap.License,
		Instructions: append(decapWrapper("decap_bench", body[0].Symbol(), &entry), body...),
	}
	empty := asm.Instructions{asm.Mov.Imm(asm.R0, xdpVerdictPass).WithSymbol("decap_empty"), asm.Return()}
	spec.Programs["decap_harness"] = &ebpf.ProgramSpec{
		Name: "decap_harness", Type: ebpf.XDP, License: decap.License,
		Instructions: append(decapWrapper("decap_harness", "decap_empty", nil), empty...),
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load the backend benchmark programs: %w", err)
	}
	return &decapBenchObjects{coll: coll, Decap: coll.Programs["xlb_decap"], Bench: coll.Programs["decap_bench"], Harness: coll.Programs["decap_harness"],
		DecapStats: coll.Maps["decap_stats"], ChainStats: coll.Maps["chain_stats"]}, nil
}

// decapWrapper returns the wrapper's instructions, which call the
// function callee with the context and return its verdict. fn, when not
// nil, is the wrapper's BTF function (needed when the callee has one).
func decapWrapper(name, callee string, fn *btf.Func) asm.Instructions {
	abort, restore := name+"_abort", name+"_restore"
	first := asm.Mov.Reg(asm.R6, asm.R1).WithSymbol(name)
	if fn != nil {
		first = btf.WithFuncMetadata(first, fn).WithSource(asm.Comment("benchmark wrapper"))
	}
	ins := asm.Instructions{
		first,
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R7, asm.R3),
		asm.Sub.Reg(asm.R7, asm.R2), // the length, kept across the call
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, decapSaveLen),
		asm.JGT.Reg(asm.R4, asm.R3, abort),
	}
	for off := int16(0); off < decapSaveLen; off += 8 {
		ins = append(ins, asm.LoadMem(asm.R0, asm.R2, off, asm.DWord), asm.StoreMem(asm.RFP, off-decapSaveLen, asm.R0, asm.DWord))
	}
	ins = append(ins,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Call.Label(callee),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word),
		asm.Sub.Reg(asm.R3, asm.R2),
		asm.Sub.Reg(asm.R3, asm.R7), // how much the callee grew the packet
		asm.JEq.Imm(asm.R3, 0, restore),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R3),
		asm.FnXdpAdjustHead.Call(),
		asm.JNE.Imm(asm.R0, 0, abort),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word).WithSymbol(restore),
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, decapSaveLen),
		asm.JGT.Reg(asm.R4, asm.R3, abort),
	)
	for off := int16(0); off < decapSaveLen; off += 8 {
		ins = append(ins, asm.LoadMem(asm.R0, asm.RFP, off-decapSaveLen, asm.DWord), asm.StoreMem(asm.R2, off, asm.R0, asm.DWord))
	}
	return append(ins,
		asm.Mov.Reg(asm.R0, asm.R8),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol(abort), // XDP_ABORTED
		asm.Return(),
	)
}

// runCase runs c's wrapped program repeat times and returns the kernel's
// time per run in nanoseconds. Every repetition must have taken the
// case's path: its verdict, each of its counters moved by one and no
// other counter, and the packet restored.
func (o *decapBenchObjects) runCase(c decapCase, ifindex, repeat uint32) (uint32, error) {
	prog := o.Bench
	if c.counters == nil {
		prog = o.Harness
	}
	before, err := o.counts()
	if err != nil {
		return 0, err
	}
	v, ns, out, err := testRunXDP(prog.FD(), c.frame, ifindex, repeat)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.name, err)
	}
	after, err := o.counts()
	if err != nil {
		return 0, err
	}
	if v != c.verdict {
		return 0, fmt.Errorf("%s: verdict %s, want %s", c.name, xdpVerdictName(v), xdpVerdictName(c.verdict))
	}
	if !bytes.Equal(out, c.frame) {
		return 0, fmt.Errorf("%s: the harness did not restore the packet", c.name)
	}
	// A run the kernel cut short for a signal is started again, after
	// the repetitions it did: the case's counters move by at least
	// repeat, all by the same number, and no other counter moves.
	var moved uint64
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := after[name] - before[name]
		switch {
		case !slices.Contains(c.counters, name) && d != 0:
			return 0, fmt.Errorf("%s: counter %s moved by %d in %d runs, want 0: the benchmark did not measure the path it names", c.name, name, d, repeat)
		case !slices.Contains(c.counters, name):
		case d < uint64(repeat) || (moved != 0 && d != moved):
			return 0, fmt.Errorf("%s: counter %s moved by %d in %d runs (the case's others by %d): the benchmark did not measure the path it names", c.name, name, d, repeat, moved)
		default:
			moved = d
		}
	}
	return ns, nil
}

// counts returns the packet counts of decap_stats and chain_stats by name.
func (o *decapBenchObjects) counts() (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, t := range []struct {
		m     *ebpf.Map
		names []string
	}{{o.DecapStats, wire.DecapStatNames}, {o.ChainStats, wire.ChainStatNames}} {
		for i, name := range t.names {
			var per []wire.Counter
			if err := t.m.Lookup(uint32(i), &per); err != nil {
				return nil, fmt.Errorf("read counter %s: %w", name, err)
			}
			for _, c := range per {
				out[name] += c.Packets
			}
		}
	}
	return out, nil
}

const (
	xdpVerdictDrop = 1
	xdpVerdictPass = 2
	xdpVerdictTX   = 3
)

func xdpVerdictName(v uint32) string {
	if names := []string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"}; int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("verdict %d", v)
}

// decapHint is a GUE header (variant 0, IPv4 inside) with the 16-byte
// daisy-chain hint: previous owner prev, none before it.
func decapHint(prev netip.Addr, changed, generation uint32) []byte {
	h := make([]byte, 20)
	h[0], h[1] = 4, 4 // hlen 4 words, IPIP
	p := prev.As4()
	copy(h[4:], p[:])
	binary.BigEndian.PutUint32(h[12:], changed)
	binary.BigEndian.PutUint32(h[16:], generation)
	return h
}

// decapFrame is what an xlb node sends the host for a TCP segment (64
// bytes of payload) from the client to the VIP: IPIP when gue is nil,
// else UDP to GUEPort with the GUE header gue. The program checks no
// transport checksum, so the inner TCP one is left 0.
func decapFrame(gue []byte, sport, dport uint16, flags uint8) []byte {
	tcp := make([]byte, 20+64)
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], 1000)
	if flags&0x10 != 0 {
		binary.BigEndian.PutUint32(tcp[8:], 1)
	}
	tcp[12], tcp[13] = 5<<4, flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	pkt := append(ipv4Header(dbClient, dbVIP, 6, len(tcp)), tcp...)
	proto := uint8(4)
	if gue != nil {
		udp := make([]byte, 8, 8+len(gue)+len(pkt))
		binary.BigEndian.PutUint16(udp[0:], 50000)
		binary.BigEndian.PutUint16(udp[2:], wire.GUEPort)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(gue)+len(pkt)))
		pkt = append(append(udp, gue...), pkt...)
		proto = 17
	}
	eth := []byte{0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00}
	return append(append(eth, ipv4Header(dbNode, dbHost, proto, len(pkt))...), pkt...)
}

// ipv4Header is a 20-byte IPv4 header (DF, TTL 64) with its checksum.
func ipv4Header(src, dst netip.Addr, proto uint8, payload int) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+payload))
	h[6], h[8], h[9] = 0x40, 64, proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	sum = (sum & 0xffff) + sum>>16
	sum = (sum & 0xffff) + sum>>16
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	return h
}
