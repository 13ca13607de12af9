package lbharness

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
)

// MatrixCase is one configuration of the hit-path matrix: the benchmarked
// service's protocol and backend count, and how many services the node
// holds in all. Miss sends a packet to an address that is no VIP instead:
// one whose bit in the VIP filter is clear, as almost every address's is,
// or, with FilterHit, one whose bit a VIP has set, so that the program
// also looks it up in the VIP set.
type MatrixCase struct {
	Proto     string `json:"proto"` // "tcp" or "udp"
	Backends  int    `json:"backends"`
	Services  int    `json:"services"`
	Miss      bool   `json:"miss,omitempty"`
	FilterHit bool   `json:"filter_hit,omitempty"`
}

func (c MatrixCase) String() string {
	if c.Miss && c.FilterHit {
		return fmt.Sprintf("miss (%s to a non-VIP address that shares a VIP's filter bit), %d services", c.Proto, c.Services)
	}
	if c.Miss {
		return fmt.Sprintf("miss (%s to a non-VIP address), %d services", c.Proto, c.Services)
	}
	return fmt.Sprintf("%s, %d backends, %d services", c.Proto, c.Backends, c.Services)
}

// MatrixResult is one case measured against its floor in the same rounds.
type MatrixResult struct {
	MatrixCase
	// LB is the LB program (bench_lb), Floor the floor it is compared
	// with (floor_parse_encap for a hit, floor_parse_tx for a miss),
	// Harness the wrapper alone.
	LB, Floor, Harness BenchResult
	// Ratio is LB / Floor on best rounds.
	Ratio float64 `json:"ratio"`
	// Paired is the median over rounds of LB / Floor in the same round.
	Paired float64 `json:"ratio_paired"`
	// Mpps is the packet rate one core would reach running only this
	// program on the best round's cost, harness included (so a lower
	// bound for the program alone; no driver, no stack).
	Mpps float64 `json:"mpps"`
	// Probes is how many index slots past its home the benchmarked
	// service sits (0: at home).
	Probes int `json:"probes"`
}

// MatrixConfig sets a matrix run.
type MatrixConfig struct {
	Cases  []MatrixCase
	Repeat uint32
	Rounds int
}

// DefaultMatrix is the hit path for TCP and UDP with 1, 16 and 1024
// backends and 1, 100 and 10 000 services, and the miss path with 10 000
// services, past the VIP filter and through it.
func DefaultMatrix() []MatrixCase {
	var out []MatrixCase
	for _, proto := range []string{"tcp", "udp"} {
		for _, b := range []int{1, 16, 1024} {
			for _, s := range []int{1, 100, 10000} {
				out = append(out, MatrixCase{Proto: proto, Backends: b, Services: s})
			}
		}
	}
	return append(out,
		MatrixCase{Proto: "tcp", Services: 10000, Miss: true},
		MatrixCase{Proto: "tcp", Services: 10000, Miss: true, FilterHit: true})
}

// RunMatrix measures each case: a fresh load of the benchmark programs,
// the benchmarked service programmed through the agent's code with its
// backends and Maglev table, the other services added to the service
// index (the part of them a packet to this service can meet: their
// tables are never read for it), then the LB program, its floor and the
// harness interleaved round after round on one pinned CPU.
func RunMatrix(cfg MatrixConfig) ([]MatrixResult, error) {
	ns := fmt.Sprintf("xlb-bench-%d", os.Getpid())
	if err := benchNS(ns); err != nil {
		return nil, err
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	// Up to 1024 backends (benchService): 10.0.3.10-10.0.7.9, all behind
	// the router.
	if b, err := exec.Command("ip", "-n", ns, "route", "add", "10.0.4.0/22", "via", "10.0.1.1").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("route to the backends: %v: %s", err, b)
	}
	var out []MatrixResult
	for _, c := range cfg.Cases {
		r, err := runMatrixCase(ns, c, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runMatrixCase(ns string, c MatrixCase, cfg MatrixConfig) (MatrixResult, error) {
	res := MatrixResult{MatrixCase: c}
	proto := lb.ProtoTCP
	if c.Proto == "udp" {
		proto = lb.ProtoUDP
	}
	if c.Services < 1 || c.Services > lb.MaxServices || (!c.Miss && c.Backends < 1) || c.Backends > 1024 || (c.FilterHit && !c.Miss) {
		return res, fmt.Errorf("%d services (1..%d), %d backends", c.Services, lb.MaxServices, c.Backends)
	}
	objs, d, err := loadBenchDataplane(netip.MustParseAddr("10.0.1.2"))
	if err != nil {
		return res, err
	}
	defer closeBench(objs, d)

	// The other services first, so that the benchmarked one meets them
	// on its probe path as a service added last would: VIPs of
	// 10.98.0.0/16 and on, one port each, in the index and the VIP set,
	// no table.
	for i := 1; i < c.Services; i++ {
		v := netip.AddrFrom4([4]byte{10, 98 + byte(i>>16), byte(i >> 8), byte(i)})
		key := lb.ServiceKey{VIP: v, Port: 80, Proto: proto}
		if err := d.IndexService(uint32(i), key, lb.EncapIPIP); err != nil {
			return res, fmt.Errorf("service %d of %d: %w", i+1, c.Services, err)
		}
	}
	vip := netip.MustParseAddr("10.99.0.1")
	key := lb.ServiceKey{VIP: vip, Port: 80, Proto: proto}
	if err := benchService(d, key, max(c.Backends, 1)); err != nil {
		return res, err
	}
	res.Probes, _ = d.IndexProbes(key)

	dst := vip
	if c.Miss {
		dst, err = missAddr(d, c.FilterHit)
		if err != nil {
			return res, err
		}
	}
	frame := benchFrame(dst)
	if proto == lb.ProtoUDP {
		frame = benchUDPFrame(frame)
	}
	floor, floorName := objs.FloorParseEncap, "floor_parse_encap"
	want := uint32(xdpVerdictTX)
	if c.Miss {
		floor, floorName, want = objs.FloorParseTx, "floor_parse_tx", xdpVerdictPass // the LB passes it
	}
	out, err := runInterleaved(ns, frame, []benchProg{
		{"wrap_only", objs.WrapOnly, xdpVerdictTX, nil}, {floorName, floor, xdpVerdictTX, nil}, {"bench_lb", objs.BenchLb, want, nil},
	}, cfg.Rounds, cfg.Repeat)
	if err != nil {
		return res, err
	}
	res.Harness, res.Floor, res.LB = out[0], out[1], out[2]
	for _, r := range []*BenchResult{&res.Floor, &res.LB} {
		r.NetNs = r.MinNs - res.Harness.MinNs
	}
	res.Ratio = res.LB.MinNs / res.Floor.MinNs
	res.Paired = PairedRatio(res.LB.RoundsNs, res.Floor.RoundsNs)
	res.Mpps = 1e3 / res.LB.MinNs

	// What the LB program did on every repetition: forwarded (a hit) or
	// passed as not ours (a miss).
	c0, err := d.ServiceCounters(0)
	if err != nil {
		return res, err
	}
	hits := uint64(cfg.Rounds)*uint64(cfg.Repeat) + 1
	if c.Miss {
		if c0.Packets != 0 {
			return res, fmt.Errorf("the miss reached the service (%d packets)", c0.Packets)
		}
		reasons, err := d.ReasonCounters()
		if err != nil {
			return res, err
		}
		n := reasons["pass_no_service"]
		// At least: a run the kernel cut short for a signal is started
		// again, after the repetitions it did.
		if n < hits {
			return res, fmt.Errorf("%d packets passed as not for a service, want at least %d: the benchmark did not measure misses", n, hits)
		}
	} else if err := checkHits(d, c0.Packets, hits); err != nil {
		return res, err
	}
	return res, nil
}

// missAddr is an address of 10.97.0.0/16, no VIP, whose bit in the VIP
// filter is clear, or with filterHit set by a VIP.
func missAddr(d *lb.Dataplane, filterHit bool) (netip.Addr, error) {
	for i := 1; i < 1<<16; i++ {
		a := netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)})
		if bit, vip := d.VIPFilterHit(a); bit == filterHit && !vip {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no address of 10.97.0.0/16 has its VIP filter bit %s", map[bool]string{true: "set", false: "clear"}[filterHit])
}

// benchUDPFrame turns benchFrame's TCP segment into a UDP datagram of the
// same length between the same ports (checksum 0: none).
func benchUDPFrame(tcp []byte) []byte {
	f := slices.Clone(tcp)
	ip := f[14:]
	ip[9] = lb.ProtoUDP
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	s = (s & 0xffff) + s>>16
	s = (s & 0xffff) + s>>16
	ip[10], ip[11] = byte(^s>>8), byte(^s)
	udp := ip[20:]
	l := len(udp)
	udp[4], udp[5] = byte(l>>8), byte(l)
	udp[6], udp[7] = 0, 0
	return f
}
