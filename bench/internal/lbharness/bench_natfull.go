package lbharness

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// MaxNATSessions is the most sessions the full-table NAT cases can open:
// the session tables' size (XLB_NAT_SESSIONS) less the one-session
// cases' own.
const MaxNATSessions = 1<<18 - 1

// natFullSeed fixes the order the full-table cases visit the sessions
// in, so that runs are comparable.
const natFullSeed = 23

// natFullSession is one session of the full table: the client's packet
// and the backend's reply, as the cases write them into the frame.
type natFullSession struct {
	fwd, rev natTuple
}

// natTuple is struct bench_tuple of bpf/bench_floors.c: a packet's
// addresses, ports and checksums, in network order.
type natTuple struct {
	saddr, daddr    [4]byte
	sport, dport    uint16
	ipCheck, tcpSum [2]byte
}

func (t natTuple) bytes() []byte {
	b := make([]byte, 16)
	copy(b[0:], t.saddr[:])
	copy(b[4:], t.daddr[:])
	binary.BigEndian.PutUint16(b[8:], t.sport)
	binary.BigEndian.PutUint16(b[10:], t.dport)
	copy(b[12:], t.ipCheck[:])
	copy(b[14:], t.tcpSum[:])
	return b
}

// tupleOf reads a frame's tuple.
func tupleOf(f []byte) natTuple {
	ip, tcp := f[14:], f[34:]
	var t natTuple
	copy(t.saddr[:], ip[12:16])
	copy(t.daddr[:], ip[16:20])
	t.sport = binary.BigEndian.Uint16(tcp[0:])
	t.dport = binary.BigEndian.Uint16(tcp[2:])
	copy(t.ipCheck[:], ip[10:12])
	copy(t.tcpSum[:], tcp[16:18])
	return t
}

// natFullClient is the client of full-table session i: 40 000 ports
// (20000 up) on each address from 10.0.2.10 up, apart from the
// one-session cases' 10.0.2.2:40000.
func natFullClient(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(10 + i/40000)}), uint16(20000+i%40000))
}

// natFull opens n sessions of the NAT twin as clients open them, through
// the LB program (the benchmark's bench_lb): each client's SYN, its
// backend's SYN-ACK to the port the program allocated, and the client's
// ACK, which establishes it. It fills the full-table cases' arrays with
// their packets in a shuffled order, and returns the sessions in that
// order. The NAT port range is widened first, so that n sessions over
// the service's backends leave the allocator most of its ports free.
func (e *benchEnv) natFull(n int) ([]natFullSession, error) {
	if n < 1 || n > MaxNATSessions {
		return nil, fmt.Errorf("%d NAT sessions: want 1 to %d, what the session tables hold beside the one-session cases'", n, MaxNATSessions)
	}
	if err := e.d.SetNAT(lb.NATConfig{Address: e.node, PortMin: 1024, PortMax: 65535}); err != nil {
		return nil, err
	}
	vip := netip.AddrPortFrom(e.vip, natPort)
	out := make([]natFullSession, n)
	err := netns.Do(e.ns, func() error {
		idx, err := benchThread()
		if err != nil {
			return err
		}
		run := func(what string, i int, f []byte) error {
			v, _, _, err := testRunXDP(e.objs.BenchLb.FD(), f, idx, 1)
			if err != nil || v != xdpVerdictTX {
				return fmt.Errorf("full-table NAT session %d, the %s: verdict %s, %v", i, what, xdpVerdictName(v), err)
			}
			return nil
		}
		for i := range n {
			client := natFullClient(i)
			if err := run("SYN", i, benchSegment(client, vip, 0x02)); err != nil {
				return err
			}
			fk := wire.SessionKey{Src: wire.AddrOf(client.Addr()), Dst: wire.AddrOf(e.vip), Sport: wire.Port(client.Port()), Dport: wire.Port(natPort), Proto: 6}
			var rk wire.SessionKey
			if err := e.objs.NatFwdSyn.Lookup(&fk, &rk); err != nil {
				return fmt.Errorf("full-table NAT session %d (%s): no embryonic session after its SYN: %w", i, client, err)
			}
			backend := netip.AddrPortFrom(rk.Src.IP(), wire.PortFrom(rk.Sport))
			source := netip.AddrPortFrom(rk.Dst.IP(), wire.PortFrom(rk.Dport))
			if err := run("SYN-ACK", i, benchSegment(backend, source, 0x12)); err != nil {
				return err
			}
			data := benchSegment(client, vip, 0x18)
			if err := run("ACK", i, benchSegment(client, vip, 0x10)); err != nil {
				return err
			}
			out[i] = natFullSession{fwd: tupleOf(data), rev: tupleOf(benchSegment(backend, source, 0x18))}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(natFullSeed, natFullSeed))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	for i, s := range out {
		if err := e.objs.BenchNatFwdSet.Put(uint32(i), s.fwd.bytes()); err != nil {
			return nil, err
		}
		if err := e.objs.BenchNatRevSet.Put(uint32(i), s.rev.bytes()); err != nil {
			return nil, err
		}
	}
	if err := e.objs.BenchNatN.Set(uint32(n)); err != nil {
		return nil, err
	}
	return out, nil
}
