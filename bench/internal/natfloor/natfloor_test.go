package natfloor

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/testbed/testenv"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

var (
	vip    = netip.MustParseAddr("10.99.0.9")
	node   = netip.MustParseAddr("10.0.1.10")
	client = netip.MustParseAddr("10.0.2.2")
	bes    = []netip.Addr{netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.3.3"), netip.MustParseAddr("10.0.3.4")}
	ourMAC = net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 0x09}
)

// run feeds frame to the floor as loaded in objs.
func run(t *testing.T, objs *floorObjects, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+64)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	v, err := objs.Natfloor.Run(opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return v, opts.DataOut
}

// sentBack is p as the floor should send it: rebuilt with its own
// checksums (the software reference), TTL one less, back to whoever
// sent the frame.
func sentBack(p xdptest.Packet) []byte {
	p.TTL--
	f := p.Frame(xdptest.SrcMAC)
	copy(f[6:12], ourMAC)
	return f
}

func TestFloorRewrites(t *testing.T) {
	testenv.RequireRoot(t, "BPF_PROG_TEST_RUN")
	var objs floorObjects
	if err := loadFloorObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	f := &Floor{objs: objs}
	if err := f.Configure(Config{VIP: vip, Node: node, Client: client, Port: 80, BackendPort: 8080, Backends: bes}); err != nil {
		t.Fatal(err)
	}
	payload := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	picked := map[int]bool{}
	ports := []uint16{65535}
	for p := uint16(40000); p < 40060; p += 2 {
		ports = append(ports, p)
	}
	for _, sport := range ports {
		picked[Pick(sport, len(bes))] = true
		be := bes[Pick(sport, len(bes))]
		req := xdptest.Packet{Src: client, Dst: vip, Sport: sport, Dport: 80, Proto: 6, TTL: 64, Payload: payload}
		v, got := run(t, &objs, req.Frame(ourMAC))
		want := sentBack(xdptest.Packet{Src: node, Dst: be, Sport: sport, Dport: 8080, Proto: 6, TTL: 64, Payload: payload})
		if v != xdptest.TX || !bytes.Equal(got, want) {
			t.Errorf("request from port %d: verdict %s, frame\n%x\nwant TX and\n%x", sport, xdptest.VerdictNames[v], got, want)
		}
		reply := xdptest.Packet{Src: be, Dst: node, Sport: 8080, Dport: sport, Proto: 6, TTL: 64, Payload: []byte("HTTP/1.1 200 OK\r\n\r\n"), TCPFlags: 0x18}
		v, got = run(t, &objs, reply.Frame(ourMAC))
		want = sentBack(xdptest.Packet{Src: vip, Dst: client, Sport: 80, Dport: sport, Proto: 6, TTL: 64, Payload: reply.Payload, TCPFlags: 0x18})
		if v != xdptest.TX || !bytes.Equal(got, want) {
			t.Errorf("reply to port %d: verdict %s, frame\n%x\nwant TX and\n%x", sport, xdptest.VerdictNames[v], got, want)
		}
	}
	if len(picked) != len(bes) {
		t.Errorf("%d ports, even but one, picked backends %v of %d", len(ports), picked, len(bes))
	}
	// Everything else is the kernel's, untouched.
	for name, p := range map[string]xdptest.Packet{
		"another client":          {Src: netip.MustParseAddr("10.0.2.3"), Dst: vip, Sport: 1, Dport: 80, Proto: 6},
		"another port of the VIP": {Src: client, Dst: vip, Sport: 1, Dport: 81, Proto: 6},
		"UDP":                     {Src: client, Dst: vip, Sport: 1, Dport: 80, Proto: 17},
		"a reply from a stranger": {Src: netip.MustParseAddr("10.0.3.9"), Dst: node, Sport: 8080, Dport: 1, Proto: 6},
		"a reply from port 80":    {Src: bes[0], Dst: node, Sport: 80, Dport: 1, Proto: 6},
		"TTL 1":                   {Src: client, Dst: vip, Sport: 1, Dport: 80, Proto: 6, TTL: 1},
		"a fragment":              {Src: client, Dst: vip, Sport: 1, Dport: 80, Proto: 6, FlagsFrag: 0x2000},
	} {
		in := p.Frame(ourMAC)
		if v, got := run(t, &objs, in); v != xdptest.Pass || !bytes.Equal(got, in) {
			t.Errorf("%s: verdict %s, frame changed %v; want PASS, untouched", name, xdptest.VerdictNames[v], !bytes.Equal(got, in))
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for name, c := range map[string]Config{
		"no backends":  {VIP: vip, Node: node, Client: client},
		"nine":         {VIP: vip, Node: node, Client: client, Backends: make([]netip.Addr, 9)},
		"IPv6 backend": {VIP: vip, Node: node, Client: client, Backends: []netip.Addr{netip.MustParseAddr("fd00::1")}},
		"no client":    {VIP: vip, Node: node, Backends: bes},
	} {
		if _, err := c.value(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
