package dataplane

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

func newFixtureDecap(t *testing.T, f *fixtureNS) *backendObjects {
	t.Helper()
	var objs backendObjects
	if err := loadBackendObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	if err := setAddrs(objs.HostAddrs, []netip.Addr{fxBackend}); err != nil {
		t.Fatal(err)
	}
	if err := setAddrs(objs.DecapVips, []netip.Addr{fxVIP}); err != nil {
		t.Fatal(err)
	}
	return &objs
}

// encapsulate wraps an IPv4 frame the way a third party might: outer
// header to dst, optionally UDP to port with the given 4 GUE bytes.
func encapsulate(inner []byte, dst netip.Addr, udpPort uint16, gue []byte) []byte {
	payload := inner[14:]
	proto := byte(4)
	if udpPort != 0 {
		udp := make([]byte, 8, 8+len(gue)+len(payload))
		binary.BigEndian.PutUint16(udp[0:], 50000)
		binary.BigEndian.PutUint16(udp[2:], udpPort)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(gue)+len(payload)))
		payload = append(append(udp, gue...), payload...)
		proto = 17
	}
	ip := make([]byte, 20, 20+len(payload))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(payload)))
	ip[8] = 64
	ip[9] = proto
	s, d := fxNode.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], csum(ip))
	out := append([]byte{}, inner[:14]...)
	return append(out, append(ip, payload...)...)
}

func TestDecap(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	inner := tcpTo(fxVIP, 80).frame(f.mac)
	notVIP := tcpTo(netip.MustParseAddr("10.99.9.9"), 80).frame(f.mac)

	cases := []struct {
		name    string
		frame   []byte
		verdict uint32
		want    []byte // expected output; nil: unchanged
		stat    string
	}{
		{"IPIP to us", encapsulate(inner, fxBackend, 0, nil), xdpPass, inner, "decap_ipip"},
		{"GUE variant 0 to us", encapsulate(inner, fxBackend, 6080, []byte{0, 4, 0, 0}), xdpPass, inner, "decap_gue"},
		{"GUE variant 0 with one option word", encapsulate(inner, fxBackend, 6080, []byte{1, 4, 0, 0, 9, 9, 9, 9}), xdpPass, inner, "decap_gue"},
		{"GUE variant 1 (IPv4 right after UDP)", encapsulate(inner, fxBackend, 6080, nil), xdpPass, inner, "decap_gue"},
		{"IPIP to another host", encapsulate(inner, fxRedirBE, 0, nil), xdpPass, nil, "pass_not_ours"},
		{"UDP to another port", encapsulate(inner, fxBackend, 6081, []byte{0, 4, 0, 0}), xdpPass, nil, "pass_not_ours"},
		{"unparseable GUE to another host", encapsulate(inner, fxRedirBE, 6080, []byte{0x20, 0, 0, 0}), xdpPass, nil, "pass_not_ours"},
		{"plain TCP to the VIP", inner, xdpPass, nil, "pass_not_ours"},
		{"IPIP, inner not for a local VIP", encapsulate(notVIP, fxBackend, 0, nil), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, truncated inner", encapsulate(inner, fxBackend, 0, nil)[:14+20+10], xdpDrop, nil, "drop_bad_inner"},
		{"GUE control message", encapsulate(inner, fxBackend, 6080, []byte{0x20, 0, 0, 0}), xdpDrop, nil, "drop_bad_gue"},
		{"GUE version 2", encapsulate(inner, fxBackend, 6080, []byte{0x80, 4, 0, 0}), xdpDrop, nil, "drop_bad_gue"},
		{"GUE carrying IPv6", encapsulate(inner, fxBackend, 6080, []byte{0, 41, 0, 0}), xdpDrop, nil, "drop_bad_gue"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := decapCounts(t, objs)
			v, out := f.run(t, objs.XlbDecap, c.frame)
			after := decapCounts(t, objs)
			if v != c.verdict {
				t.Errorf("verdict %s, want %s", verdictNames[v], verdictNames[c.verdict])
			}
			want := c.want
			if want == nil && v == xdpPass {
				want = c.frame
			}
			if want != nil && !bytes.Equal(out, want) {
				t.Errorf("output\n got %x\nwant %x", out, want)
			}
			for i, name := range DecapStatNames {
				d := after[i] - before[i]
				if (name == c.stat) != (d == 1) || d > 1 {
					t.Errorf("counter %s moved by %d (case expects %s)", name, d, c.stat)
				}
			}
		})
	}
}

func decapCounts(t *testing.T, objs *backendObjects) []uint64 {
	t.Helper()
	out := make([]uint64, len(DecapStatNames))
	for i := range DecapStatNames {
		c, err := sumPerCPU(objs.DecapStats, uint32(i))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c.Packets
	}
	return out
}

// TestRoundTrip sends what the LB program emits through the backend
// program: the stack must receive the client's packet (TTL one lower).
func TestRoundTrip(t *testing.T) {
	d, f := newFixtureLB(t)
	objs := newFixtureDecap(t, f)
	for _, p := range []pkt{
		tcpTo(fxVIP, 80),
		{src: fxClient, dst: fxVIP, sport: 5353, dport: 53, proto: 17, payload: []byte("q")},
	} {
		in := p.frame(f.mac)
		v, enc := f.run(t, d.objs.XlbLbProg, in)
		if v != xdpTX {
			t.Fatalf("LB verdict %s", verdictNames[v])
		}
		v, dec := f.run(t, objs.XlbDecap, enc)
		if v != xdpPass {
			t.Fatalf("decap verdict %s", verdictNames[v])
		}
		checkInner(t, dec[14:], in)
	}
}
