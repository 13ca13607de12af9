package lbharness

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/testbed/netns"
)

// BenchResult is one program's cost per packet over several rounds.
type BenchResult struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Verdict     string    `json:"verdict"`
	RoundsNs    []float64 `json:"rounds_ns"`
	MedianNs    float64   `json:"median_ns"`
	// MinNs is the fastest round: on a shared machine the least disturbed
	// one, and the most repeatable estimate of the program's own cost.
	MinNs float64 `json:"min_ns"`
	// NetNs is MinNs less the wrapper's own (wrap_only) MinNs.
	NetNs float64 `json:"net_ns"`
}

// BenchConfig sets the size of a benchmark run.
type BenchConfig struct {
	Backends int    // backends of the benchmarked service
	Repeat   uint32 // BPF_PROG_TEST_RUN repetitions per round
	Rounds   int    // rounds, interleaved over the programs
	// NATSessions is how many sessions the full-table NAT cases open
	// (0: no such cases).
	NATSessions int
}

var benchDescriptions = map[string]string{
	"wrap_only":             "save and restore of the packet front only: the harness cost, subtracted from the others",
	"floor_parse_tx":        "floor 1: parse Ethernet/IPv4/ports, XDP_TX",
	"floor_parse_encap":     "floor 2: parse, TTL, IPIP encapsulation to a fixed backend with fixed MACs, XDP_TX; no lookup, no flow hash",
	"floor_parse_encap_fib": "floor 3: floor 2 with the route to the backend looked up for every packet (bpf_fib_lookup) and its MACs written",
	"bench_lb":              "the full LB path: service index, Maglev slot, next hop (cached FIB result), counters, IPIP, XDP_TX",
	"bench_lb_affinity":     "the full LB path to a service with client-IP affinity (the same backends on port 81): the flow hash without the source port",
	"bench_lb_nat_fwd":      "a NAT service's session hit, client to backend (the same backends on port 8080): session lookup, rewrite of addresses, ports and checksums, next hop (cached), counters, XDP_TX",
	"bench_lb_nat_rev":      "the same session's reply, backend to client: session lookup by the reply's 5-tuple, rewrite, next hop cached in the session, XDP_TX",
	"wrap_pick":             "the full-table cases' harness: wrap_only, and the next session's addresses, ports and checksums written into the packet; subtracted from them",
	"bench_lb_nat_fwd_full": "bench_lb_nat_fwd with every run on another session of a full table (-nat-sessions established sessions, visited in a shuffled order): the session hit with its entries out of the caches",
	"bench_lb_nat_rev_full": "bench_lb_nat_rev on the full table: every run the reply of another session",
	"floor_parse_encap6":    "floor 2 for IPv6: parse Ethernet/IPv6/ports, hop limit, IPv6-in-IPv6 to a fixed backend with fixed MACs, XDP_TX; no lookup, no flow hash",
	"bench_lb6":             "the full LB path for IPv6: the same service on an IPv6 VIP with IPv6 backends, IPv6-in-IPv6",
}

// The benchmarked service's IPv6 twin (bench_lb6): service ID 3 on
// vip6:80, IPv6 backends from fd00:3::10 up, from node6.
var (
	node6 = netip.MustParseAddr("fd00:1::2")
	vip6  = netip.MustParseAddr("fd00:99::1")
)

// affinityPort is the port of the benchmarked service's twin with
// client-IP affinity.
const affinityPort = 81

// natPort is the port of the benchmarked service's NAT twin, and the port
// its backends listen on.
const natPort = 8080

// RunBenchmark measures the LB program on a VIP hit against its floors
// with BPF_PROG_TEST_RUN, in a network namespace of its own (removed
// afterwards) where the backends are reachable through a resolved
// neighbour, so the full path ends in XDP_TX as on a real node.
func RunBenchmark(cfg BenchConfig) ([]BenchResult, error) {
	env, err := openBenchEnv("xlb-bench", cfg.Backends)
	if err != nil {
		return nil, err
	}
	defer env.close()
	ns, objs, vip := env.ns, env.objs, env.vip

	run := []benchProg{
		{"wrap_only", objs.WrapOnly, xdpVerdictTX, nil},
		{"floor_parse_tx", objs.FloorParseTx, xdpVerdictTX, nil},
		{"floor_parse_encap", objs.FloorParseEncap, xdpVerdictTX, nil},
		{"floor_parse_encap_fib", objs.FloorParseEncapFib, xdpVerdictTX, nil},
		{"bench_lb", objs.BenchLb, xdpVerdictTX, nil},
		{"bench_lb_affinity", objs.BenchLb, xdpVerdictTX, benchFramePort(vip, affinityPort)},
		{"bench_lb_nat_fwd", objs.BenchLb, xdpVerdictTX, benchFramePort(vip, natPort)},
		{"bench_lb_nat_rev", objs.BenchLb, xdpVerdictTX, env.natReply},
		{"floor_parse_encap6", objs.FloorParseEncap6, xdpVerdictTX, benchFrame6(vip6)},
		{"bench_lb6", objs.BenchLb, xdpVerdictTX, benchFrame6(vip6)},
	}
	if cfg.NATSessions > 0 {
		if _, err := env.natFull(cfg.NATSessions); err != nil {
			return nil, err
		}
		run = append(run,
			benchProg{"wrap_pick", objs.WrapPick, xdpVerdictTX, nil},
			benchProg{"bench_lb_nat_fwd_full", objs.BenchLbNatFwdFull, xdpVerdictTX, benchFramePort(vip, natPort)},
			benchProg{"bench_lb_nat_rev_full", objs.BenchLbNatRevFull, xdpVerdictTX, env.natReply})
	}
	out, err := runInterleaved(ns, benchFrame(vip), run, cfg.Rounds, cfg.Repeat)
	if err != nil {
		return nil, err
	}
	if err := env.checkNAT(cfg); err != nil {
		return nil, err
	}
	var pick float64
	for i := range out {
		out[i].NetNs = out[i].MinNs - out[0].MinNs
		// The full-table cases less their own harness, which also
		// writes the next session into the packet.
		if out[i].Name == "wrap_pick" {
			pick = out[i].MinNs
		}
		if strings.HasSuffix(out[i].Name, "_full") {
			out[i].NetNs = out[i].MinNs - pick
		}
	}
	// A VIP hit must have been counted as a forward on every round.
	if err := env.checkForwarded(cfg); err != nil {
		return nil, err
	}
	if err := env.checkForwarded6(cfg); err != nil {
		return nil, err
	}
	return out, nil
}

// benchProg is a program an interleaved run measures, and the verdict
// it must return; frame, when set, is its input instead of the run's.
type benchProg struct {
	name  string
	prog  *ebpf.Program
	want  uint32
	frame []byte
}

// runInterleaved measures progs on frame in namespace ns, on one CPU:
// each once first, which must return its verdict and leave the packet as
// it was (the harness restores it), then rounds rounds of repeat runs
// of each in turn, every run with its verdict. Result i
// is progs[i]'s rounds, median and best round.
func runInterleaved(ns string, frame []byte, progs []benchProg, rounds int, repeat uint32) ([]BenchResult, error) {
	out := make([]BenchResult, len(progs))
	err := netns.Do(ns, func() error {
		idx, err := benchThread()
		if err != nil {
			return err
		}
		input := func(p benchProg) []byte {
			if p.frame != nil {
				return p.frame
			}
			return frame
		}
		for i, p := range progs {
			v, _, res, err := testRunXDP(p.prog.FD(), input(p), idx, 1)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if v != p.want {
				return fmt.Errorf("%s: verdict %s, want %s", p.name, xdpVerdictName(v), xdpVerdictName(p.want))
			}
			if string(res) != string(input(p)) {
				return fmt.Errorf("%s: the harness did not restore the packet", p.name)
			}
			out[i] = BenchResult{Name: p.name, Description: benchDescriptions[p.name], Verdict: xdpVerdictName(v)}
		}
		for r := range rounds {
			for i, p := range progs {
				v, ns, _, err := testRunXDP(p.prog.FD(), input(p), idx, repeat)
				if err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				if v != p.want {
					return fmt.Errorf("%s: verdict %s in round %d, want %s", p.name, xdpVerdictName(v), r, xdpVerdictName(p.want))
				}
				out[i].RoundsNs = append(out[i].RoundsNs, float64(ns))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].MedianNs = median(out[i].RoundsNs)
		out[i].MinNs = slices.Min(out[i].RoundsNs)
	}
	return out, nil
}

// benchEnv is where the LB benchmarks run: a namespace of their own
// (benchNS), the benchmark objects with the node address 10.0.1.2, and
// the benchmarked service (benchService) on vip.
type benchEnv struct {
	ns   string
	node netip.Addr
	vip  netip.Addr
	objs *benchObjects
	d    *lb.Dataplane
	// natReply is a reply of the NAT twin's one session, from its
	// backend to the node.
	natReply []byte
}

// openBenchEnv makes a benchEnv whose namespace is named prefix and the
// process ID, with backends backends. close removes it all.
func openBenchEnv(prefix string, backends int) (*benchEnv, error) {
	e := &benchEnv{
		ns:   fmt.Sprintf("%s-%d", prefix, os.Getpid()),
		node: netip.MustParseAddr("10.0.1.2"),
		vip:  netip.MustParseAddr("10.99.0.1"),
	}
	if err := benchNS(e.ns); err != nil {
		return nil, err
	}
	err := e.load(backends)
	if err != nil {
		exec.Command("ip", "netns", "del", e.ns).Run()
		return nil, err
	}
	return e, nil
}

// load loads the objects and programs the service.
func (e *benchEnv) load(backends int) error {
	var err error
	if e.objs, e.d, err = loadBenchDataplane(e.node); err != nil {
		return err
	}
	if err := benchService(e.d, lb.ServiceKey{VIP: e.vip, Port: 80, Proto: lb.ProtoTCP}, backends); err != nil {
		e.close()
		return err
	}
	// Its twin with affinity, with backend IDs of its own, as the agent
	// gives each service.
	if err := benchServiceWith(e.d, 1, lb.ServiceKey{VIP: e.vip, Port: affinityPort, Proto: lb.ProtoTCP}, backends, uint32(backends), true); err != nil {
		e.close()
		return err
	}
	if err := e.natService(backends); err != nil {
		e.close()
		return err
	}
	if err := benchService6(e.d, 3, lb.ServiceKey{VIP: vip6, Port: 80, Proto: lb.ProtoTCP}, backends, 3*uint32(backends)); err != nil {
		e.close()
		return err
	}
	return nil
}

// benchService6 is benchService's IPv6 twin: service id on key (an IPv6
// VIP) over IPv6-in-IPv6 to backends backends from fd00:3::10 up, with
// backend IDs from idBase.
func benchService6(d *lb.Dataplane, id uint32, key lb.ServiceKey, backends int, idBase uint32) error {
	bs := make([]maglev.Backend, backends)
	for i := range bs {
		b := netip.MustParseAddr("fd00:3::").As16()
		binary.BigEndian.PutUint16(b[14:], 0x10+uint16(i))
		a := netip.AddrFrom16(b)
		bs[i] = maglev.Backend{Key: netip.AddrPortFrom(a, 80).String(), Weight: 1}
		if err := d.UpsertBackend(idBase+uint32(i), netip.AddrPortFrom(a, 80)); err != nil {
			return err
		}
	}
	slots, err := maglev.Build(bs, maglev.DefaultSize)
	if err != nil {
		return err
	}
	table := make([]uint32, len(slots))
	for i, s := range slots {
		table[i] = idBase + uint32(s)
	}
	return d.UpsertService(lb.Service{ID: id, Key: key, Encap: lb.EncapIPIP, Table: table})
}

// natService programs the NAT twin of the benchmarked service, ID 2 on
// port natPort, with backend IDs of its own at the same addresses, port
// natPort, and opens the one session the NAT cases measure: the
// benchmark frame's SYN, answered by its backend, and its ACK.
func (e *benchEnv) natService(backends int) error {
	if err := e.d.SetNAT(lb.NATConfig{Address: e.node, PortMin: 20000, PortMax: 32767}); err != nil {
		return err
	}
	key := lb.ServiceKey{VIP: e.vip, Port: natPort, Proto: lb.ProtoTCP}
	if err := benchServiceOf(e.d, 2, key, backends, 2*uint32(backends), false, lb.EncapNAT, natPort); err != nil {
		return err
	}
	syn := benchFramePort(e.vip, natPort)
	syn[14+20+13] = 0x02
	setTCPChecksum(syn)
	var sessions []lb.Session
	err := netns.Do(e.ns, func() error {
		idx, err := benchThread()
		if err != nil {
			return err
		}
		if v, _, _, err := testRunXDP(e.objs.BenchLb.FD(), syn, idx, 1); err != nil || v != xdpVerdictTX {
			return fmt.Errorf("the NAT case's SYN: verdict %s, %v", xdpVerdictName(v), err)
		}
		if sessions, err = e.d.Sessions(e.vip, natPort, lb.ProtoTCP, 1); err != nil || len(sessions) != 1 {
			return fmt.Errorf("the NAT case's session: %v, %v", sessions, err)
		}
		s := sessions[0]
		e.natReply = benchSegment(s.Backend, s.Source, 0x18)
		synAck := append([]byte(nil), e.natReply...)
		synAck[14+20+13] = 0x12
		setTCPChecksum(synAck)
		if v, _, _, err := testRunXDP(e.objs.BenchLb.FD(), synAck, idx, 1); err != nil || v != xdpVerdictTX {
			return fmt.Errorf("the NAT case's SYN-ACK: verdict %s, %v", xdpVerdictName(v), err)
		}
		// The client's ACK establishes the session: the cases measure
		// the established tables.
		if v, _, _, err := testRunXDP(e.objs.BenchLb.FD(), benchFramePort(e.vip, natPort), idx, 1); err != nil || v != xdpVerdictTX {
			return fmt.Errorf("the NAT case's ACK: verdict %s, %v", xdpVerdictName(v), err)
		}
		return nil
	})
	return err
}

// checkNAT says whether every run of the NAT cases translated the one
// session, established, both ways.
func (e *benchEnv) checkNAT(cfg BenchConfig) error {
	st, err := e.d.NATStatCounters()
	if err != nil {
		return err
	}
	// The full-table cases count with the one-session cases, and their
	// sessions were all opened before: every run was a hit.
	want := uint64(cfg.Rounds)*uint64(cfg.Repeat) + 1
	sessions := uint64(1)
	if cfg.NATSessions > 0 {
		want *= 2
		sessions += uint64(cfg.NATSessions)
	}
	if st["forward"] < want || st["reverse"] < want || st["created"] != sessions || st["promoted"] != sessions {
		return fmt.Errorf("NAT counters %v: want %d sessions, established, and at least %d packets each way", st, sessions, want)
	}
	return nil
}

// checkForwarded says whether the benchmarked service counted every
// repetition of a run of cfg's size as a forward (checkHits).
func (e *benchEnv) checkForwarded(cfg BenchConfig) error {
	c, err := e.d.ServiceCounters(0)
	if err != nil {
		return err
	}
	return checkHits(e.d, c.Packets, uint64(cfg.Rounds)*uint64(cfg.Repeat)+1)
}

// checkForwarded6 is checkForwarded for the IPv6 twin (bench_lb6).
func (e *benchEnv) checkForwarded6(cfg BenchConfig) error {
	c, err := e.d.ServiceCounters(3)
	if err != nil {
		return err
	}
	if want := uint64(cfg.Rounds)*uint64(cfg.Repeat) + 1; c.Packets < want {
		return fmt.Errorf("the IPv6 service counted %d packets, want at least %d: the benchmark did not measure IPv6 VIP hits", c.Packets, want)
	}
	return nil
}

func (e *benchEnv) close() {
	closeBench(e.objs, e.d)
	exec.Command("ip", "netns", "del", e.ns).Run()
}

// benchService programs the benchmarked service, ID 0 on key, over IPIP
// to backends backends from 10.0.3.10 up (10.0.7.9 for 1024: the route
// to 10.0.3.0/24 is benchNS's, the one beyond RunMatrix's), through the
// same code the agent uses.
func benchService(d *lb.Dataplane, key lb.ServiceKey, backends int) error {
	return benchServiceWith(d, 0, key, backends, 0, false)
}

// benchServiceWith is benchService for service id, with backend IDs from
// idBase up and client-IP affinity set to clientIP.
func benchServiceWith(d *lb.Dataplane, id uint32, key lb.ServiceKey, backends int, idBase uint32, clientIP bool) error {
	return benchServiceOf(d, id, key, backends, idBase, clientIP, lb.EncapIPIP, 80)
}

// benchServiceOf is benchServiceWith for a service of encapsulation
// encap whose backends listen on port.
func benchServiceOf(d *lb.Dataplane, id uint32, key lb.ServiceKey, backends int, idBase uint32, clientIP bool, encap lb.Encap, port uint16) error {
	bs := make([]maglev.Backend, backends)
	for i := range bs {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], 0x0a00030a+uint32(i))
		a := netip.AddrFrom4(b)
		bs[i] = maglev.Backend{Key: netip.AddrPortFrom(a, port).String(), Weight: 1}
		if err := d.UpsertBackend(idBase+uint32(i), netip.AddrPortFrom(a, port)); err != nil {
			return err
		}
	}
	slots, err := maglev.Build(bs, maglev.DefaultSize)
	if err != nil {
		return err
	}
	table := make([]uint32, len(slots))
	for i, s := range slots {
		table[i] = idBase + uint32(s)
	}
	return d.UpsertService(lb.Service{ID: id, Key: key, Encap: encap, Table: table, ClientIP: clientIP})
}

// loadBenchDataplane loads the benchmark programs, with node as the
// outer source and the default table size, on the maps of an LB data
// plane (lb.New) that they share, so that services are programmed
// through the agent's own code.
func loadBenchDataplane(node netip.Addr) (*benchObjects, *lb.Dataplane, error) {
	d, err := lb.New(lb.Options{NodeAddr: node, NodeAddr6: node6, TableSize: maglev.DefaultSize})
	if err != nil {
		return nil, nil, fmt.Errorf("load the LB data plane: %w", err)
	}
	objs, err := loadBenchOn(d, node)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return objs, d, nil
}

// loadBenchOn loads the benchmark programs on the maps of d.
func loadBenchOn(d *lb.Dataplane, node netip.Addr) (*benchObjects, error) {
	spec, err := loadBench()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["node_addr"].Set(wire.Addr4(node)); err != nil {
		return nil, err
	}
	if err := spec.Variables["node_addr6"].Set(wire.AddrOf(node6)); err != nil {
		return nil, err
	}
	if err := spec.Variables["table_size"].Set(uint32(maglev.DefaultSize)); err != nil {
		return nil, err
	}
	spec.Maps["maglev_tables"].InnerMap.MaxEntries = maglev.DefaultSize
	spec.Maps["chain_tables"].InnerMap.MaxEntries = maglev.DefaultSize + 1
	var objs benchObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: d.Maps()}); err != nil {
		return nil, fmt.Errorf("load benchmark programs: %w", err)
	}
	if err := objs.NhGen.Set(uint32(1)); err != nil { // odd, as Open makes it
		objs.Close()
		return nil, err
	}
	return &objs, nil
}

// closeBench releases the benchmark programs and the data plane whose
// maps they use.
func closeBench(objs *benchObjects, d *lb.Dataplane) {
	objs.Close()
	d.Close()
}

// checkHits says whether every run of the LB program was a VIP hit
// forwarded: the service counted at least want packets (more when the
// kernel cut a run short for a signal and it was started again, after
// the repetitions it did) and no packet took a pass or drop reason.
func checkHits(d *lb.Dataplane, counted, want uint64) error {
	if counted < want {
		return fmt.Errorf("service counted %d packets, want at least %d: the benchmark did not measure VIP hits", counted, want)
	}
	reasons, err := d.ReasonCounters()
	if err != nil {
		return err
	}
	for name, n := range reasons {
		if n != 0 {
			return fmt.Errorf("%d packets counted as %s: the benchmark did not measure only VIP hits", n, name)
		}
	}
	return nil
}

// PairedRatio is the median of a[i]/b[i] over the rounds both have: with
// the programs interleaved, round i of each met the same disturbances.
func PairedRatio(a, b []float64) float64 {
	var q []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			q = append(q, a[i]/b[i])
		}
	}
	return median(q)
}

// PairedDiff is the median over rounds of a's round less b's: what one
// program takes longer than another, each round against the round that
// met the same disturbances.
func PairedDiff(a, b []float64) float64 {
	var d []float64
	for i := range min(len(a), len(b)) {
		d = append(d, a[i]-b[i])
	}
	return median(d)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchNS(ns string) error {
	cmds := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1"},
		{"-n", ns, "link", "set", "veth0", "up"},
		{"-n", ns, "link", "set", "veth1", "up"},
		{"-n", ns, "addr", "add", "10.0.1.2/24", "dev", "veth0"},
		{"-n", ns, "neigh", "add", "10.0.1.1", "lladdr", "02:00:00:00:00:01", "dev", "veth0", "nud", "permanent"},
		{"-n", ns, "route", "add", "10.0.3.0/24", "via", "10.0.1.1"},
		// The clients, where NAT replies go.
		{"-n", ns, "route", "add", "10.0.2.0/24", "via", "10.0.1.1"},
		// IPv6 (bench_lb6).
		{"-n", ns, "addr", "add", "fd00:1::2/64", "dev", "veth0", "nodad"},
		{"-n", ns, "neigh", "add", "fd00:1::1", "lladdr", "02:00:00:00:00:01", "dev", "veth0", "nud", "permanent"},
		{"-n", ns, "route", "add", "fd00:3::/64", "via", "fd00:1::1"},
	}
	for i, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			if i > 0 {
				exec.Command("ip", "netns", "del", ns).Run()
			}
			return fmt.Errorf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return netns.Do(ns, func() error {
		if err := lb.PrepareInterface("veth0"); err != nil {
			return err
		}
		return lb.PrepareInterface6("veth0")
	})
}

// benchFrame6 is benchFrame over IPv6: a 64-byte-payload TCP segment
// from fd00:2::2 to vip.
func benchFrame6(vip netip.Addr) []byte {
	f := make([]byte, 14+40+20+64)
	copy(f[0:], []byte{0x02, 0, 0, 0, 0, 0x02})
	copy(f[6:], []byte{0x02, 0, 0, 0, 0, 0x01})
	f[12], f[13] = 0x86, 0xdd
	ip := f[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(f)-14-40))
	ip[6], ip[7] = 6, 64
	src, dst := netip.MustParseAddr("fd00:2::2").As16(), vip.As16()
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	tcp := ip[40:]
	tcp[0], tcp[1] = 0x9c, 0x40 // 40000
	tcp[2], tcp[3] = 0, 80
	tcp[12] = 5 << 4
	tcp[13] = 0x18
	return f
}

// benchFrame is a 64-byte-payload TCP segment from a client to the VIP.
func benchFrame(vip netip.Addr) []byte { return benchFramePort(vip, 80) }

// benchFramePort is benchFrame to another destination port.
func benchFramePort(vip netip.Addr, port uint16) []byte {
	f := make([]byte, 14+20+20+64)
	copy(f[0:], []byte{0x02, 0, 0, 0, 0, 0x02})
	copy(f[6:], []byte{0x02, 0, 0, 0, 0, 0x01})
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0] = 0x45
	ip[2], ip[3] = 0, byte(len(f)-14)
	ip[6] = 0x40
	ip[8] = 64
	ip[9] = 6
	copy(ip[12:], []byte{10, 0, 2, 2})
	v := vip.As4()
	copy(ip[16:], v[:])
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	s = (s & 0xffff) + s>>16
	s = (s & 0xffff) + s>>16
	ip[10], ip[11] = byte(^s>>8), byte(^s)
	tcp := ip[20:]
	tcp[0], tcp[1] = 0x9c, 0x40 // 40000
	tcp[2], tcp[3] = byte(port>>8), byte(port)
	tcp[12] = 5 << 4
	tcp[13] = 0x18
	return f
}

// benchSegment is benchFramePort's 64-byte-payload TCP segment from
// `from` to `to` with TCP flags flags (0x18 as a backend replies), its
// checksums computed.
func benchSegment(from, to netip.AddrPort, flags byte) []byte {
	f := benchFramePort(to.Addr(), to.Port())
	s := from.Addr().As4()
	copy(f[14+12:], s[:])
	f[14+20], f[14+21] = byte(from.Port()>>8), byte(from.Port())
	f[14+20+13] = flags
	f[14+10], f[14+11] = 0, 0
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(f[14+i])<<8 | uint32(f[14+i+1])
	}
	sum = (sum & 0xffff) + sum>>16
	sum = (sum & 0xffff) + sum>>16
	f[14+10], f[14+11] = byte(^sum>>8), byte(^sum)
	setTCPChecksum(f)
	return f
}

// setTCPChecksum computes the TCP checksum of frame from scratch.
func setTCPChecksum(f []byte) {
	ip := f[14:]
	tcp := ip[20:]
	tcp[16], tcp[17] = 0, 0
	sum := uint32(6) + uint32(len(tcp))
	for i := 12; i < 20; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for i := 0; i+1 < len(tcp); i += 2 {
		sum += uint32(tcp[i])<<8 | uint32(tcp[i+1])
	}
	for sum > 0xffff {
		sum = (sum & 0xffff) + sum>>16
	}
	tcp[16], tcp[17] = byte(^sum>>8), byte(^sum)
}

// benchThread pins the calling thread, inside a benchmark's namespace, to
// one CPU for the whole run (no migration between rounds, and the per-CPU
// next-hop cache stays warm as on a NIC queue), and returns the index of
// the namespace's veth0, the test runs' ingress interface.
func benchThread() (uint32, error) {
	var cpus unix.CPUSet
	cpus.Set(runtime.NumCPU() - 1)
	if err := unix.SchedSetaffinity(0, &cpus); err != nil {
		return 0, fmt.Errorf("pin the benchmark to a CPU: %w", err)
	}
	iface, err := net.InterfaceByName("veth0")
	if err != nil {
		return 0, err
	}
	return uint32(iface.Index), nil
}
