package lb

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os/exec"
	"testing"
)

// FuzzLBProgram feeds arbitrary frames to the LB program through
// BPF_PROG_TEST_RUN. Whatever arrives, the program must return a defined
// verdict, leave what it passes untouched (unless it encapsulated it for
// the kernel to forward), and emit only well-formed packets to known
// backends or ICMP replies.
//
//	go test -fuzz FuzzLBProgram -fuzztime 30s ./internal/dataplane/
func FuzzLBProgram(f *testing.F) {
	d, fx := newFixtureLB(f)
	// Fuzzing workers are ended without running cleanups: drop the
	// namespace's name now, so that it lives only as long as the thread
	// parked in it, and goes with the worker however that ends.
	if out, err := exec.Command("ip", "netns", "del", fx.Name).CombinedOutput(); err != nil {
		f.Fatalf("ip netns del %s: %v: %s", fx.Name, err, out)
	}
	for _, p := range []pkt{
		tcpTo(fxVIP, 80),
		{Src: fxClient, Dst: fxVIP, Sport: 9, Dport: 53, Proto: 17},
		tcpTo(netip.MustParseAddr("10.99.0.3"), 80),
		tcpTo(netip.MustParseAddr("10.99.0.2"), 80),
		{Src: fxClient, Dst: fxVIP, Sport: 1, Dport: 80, Proto: 6, Options: []byte{1, 1, 1, 0}},
		{Src: fxClient, Dst: fxVIP, Sport: 1, Dport: 80, Proto: 6, FlagsFrag: 0x2000},
	} {
		f.Add(p.Frame(fx.MAC))
	}
	big := tcpTo(netip.MustParseAddr("10.99.0.4"), 80)
	big.Payload = make([]byte, 1400)
	f.Add(big.Frame(fx.MAC))

	backends := map[netip.Addr]bool{fxBackend: true, fxRedirBE: true, fxNoNeighBE: true, fxSmallMTU: true}
	f.Fuzz(func(t *testing.T, frame []byte) {
		// BPF_PROG_TEST_RUN refuses XDP frames shorter than an Ethernet
		// header (EINVAL): drop_malformed_eth is out of reach here, as for
		// every fixture (TestShortFrames, docs/architecture.md).
		if len(frame) < 14 {
			frame = append(frame, make([]byte, 14-len(frame))...)
		}
		if len(frame) > 3000 {
			frame = frame[:3000]
		}
		v, out := fx.Run(t, d.objs.XlbLbProg, frame)
		switch v {
		case xdpDrop:
			return
		case xdpPass:
			if bytes.Equal(out, frame) {
				return
			}
			checkEmitted(t, out, map[netip.Addr]bool{fxNoNeighBE: true})
		case xdpTX, xdpRedirect:
			checkEmitted(t, out, backends)
		default:
			t.Fatalf("verdict %d", v)
		}
	})
}

// checkEmitted asserts that a frame the program produced is an IPv4
// packet with a valid header checksum, either encapsulated (IPIP or GUE)
// from this node to one of the allowed backends, or an ICMP error.
func checkEmitted(t *testing.T, out []byte, allowed map[netip.Addr]bool) {
	t.Helper()
	if len(out) < 34 || binary.BigEndian.Uint16(out[12:]) != 0x0800 || out[14] != 0x45 {
		t.Fatalf("emitted frame is not IPv4: %x", out)
	}
	ip := out[14:34]
	if csum(ip) != 0 {
		t.Fatalf("emitted IPv4 checksum invalid: %x", ip)
	}
	if int(binary.BigEndian.Uint16(ip[2:])) != len(out)-14 {
		t.Fatalf("emitted total length %d, frame carries %d", binary.BigEndian.Uint16(ip[2:]), len(out)-14)
	}
	src := netip.AddrFrom4([4]byte(ip[12:16]))
	dst := netip.AddrFrom4([4]byte(ip[16:20]))
	if src != fxNode {
		t.Fatalf("emitted from %v, want %v", src, fxNode)
	}
	switch ip[9] {
	case 1:
		if out[34] != 3 || out[35] != 4 || csum(out[34:]) != 0 {
			t.Fatalf("bad ICMP reply %x", out[34:])
		}
	case 4, 17:
		if !allowed[dst] {
			t.Fatalf("encapsulated to %v, not an allowed backend", dst)
		}
	default:
		t.Fatalf("emitted protocol %d", ip[9])
	}
}
