package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/xlbproject/xlb/testbed/testenv"
)

func testSpec() frameSpec {
	return frameSpec{
		SrcMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 2},
		Src: netip.MustParseAddr("10.0.2.2"), Dst: netip.MustParseAddr("10.99.0.1"), Sport: 40000, Dport: 7777,
	}
}

func TestUDPFrame(t *testing.T) {
	f, err := udpFrame(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != minFrame {
		t.Fatalf("frame of %d bytes, want %d", len(f), minFrame)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"destination MAC", net.HardwareAddr(f[0:6]).String(), "02:00:00:00:00:02"},
		{"source MAC", net.HardwareAddr(f[6:12]).String(), "02:00:00:00:00:01"},
		{"EtherType", binary.BigEndian.Uint16(f[12:14]), uint16(0x0800)},
		{"version and IHL", f[14], byte(0x45)},
		{"IP total length", binary.BigEndian.Uint16(f[16:18]), uint16(46)},
		{"TTL", f[22], byte(64)},
		{"protocol", f[23], byte(17)},
		{"source", netip.AddrFrom4([4]byte(f[26:30])).String(), "10.0.2.2"},
		{"destination", netip.AddrFrom4([4]byte(f[30:34])).String(), "10.99.0.1"},
		{"source port", binary.BigEndian.Uint16(f[34:36]), uint16(40000)},
		{"destination port", binary.BigEndian.Uint16(f[36:38]), uint16(7777)},
		{"UDP length", binary.BigEndian.Uint16(f[38:40]), uint16(26)},
		{"UDP checksum (none)", binary.BigEndian.Uint16(f[40:42]), uint16(0)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	// A header with a correct checksum sums to 0xffff (one's
	// complement), so its checksum computed again is 0.
	if c := ipChecksum(f[14:34]); c != 0 {
		t.Errorf("IPv4 header checksum does not verify: %#04x", c)
	}
}

func TestIPChecksumKnownHeader(t *testing.T) {
	// The classic example header (checksum field zeroed): 0xb861.
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := ipChecksum(h); got != 0xb861 {
		t.Fatalf("checksum %#04x, want 0xb861", got)
	}
}

func TestUDPFrameRejects(t *testing.T) {
	for name, mod := range map[string]func(*frameSpec){
		"short MAC": func(s *frameSpec) { s.SrcMAC = net.HardwareAddr{1, 2, 3} },
		"IPv6":      func(s *frameSpec) { s.Dst = netip.MustParseAddr("2001:db8::1") },
		"no source": func(s *frameSpec) { s.Src = netip.Addr{} },
	} {
		s := testSpec()
		mod(&s)
		if _, err := udpFrame(s); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestGeneratorInsnsWriteTheTemplate(t *testing.T) {
	f, err := udpFrame(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	insns, err := generatorInsns(f, 3, -1)
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild the bytes the program stores at data+0, +8, …: they must
	// be the template's headers.
	var pending int64
	var have bool
	written := make([]byte, headerWords*8)
	stores := 0
	for _, ins := range insns {
		if ins.OpCode.IsDWordLoad() && ins.Dst == asm.R5 {
			pending, have = ins.Constant, true
			continue
		}
		if ins.OpCode.Class().IsStore() && ins.Dst == asm.R2 && ins.Src == asm.R5 && have {
			binary.NativeEndian.PutUint64(written[ins.Offset:], uint64(pending))
			stores++
			have = false
		}
	}
	if stores != headerWords {
		t.Fatalf("%d header stores, want %d", stores, headerWords)
	}
	if !bytes.Equal(written, f[:headerWords*8]) {
		t.Fatalf("the program writes\n%x\nwant the template's\n%x", written, f[:headerWords*8])
	}
	if headerWords*8 < udpSportOff+udpLen {
		t.Fatalf("the program writes %d bytes, less than the headers (%d)", headerWords*8, udpSportOff+udpLen)
	}
	// The program must assemble (jump targets resolved) without a
	// kernel: marshal it.
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatalf("marshal: %v", err)
	}
}

func TestGeneratorInsnsRejectsShortFrame(t *testing.T) {
	if _, err := generatorInsns(make([]byte, 20), 3, -1); err == nil {
		t.Fatal("no error for a frame shorter than the headers")
	}
}

func TestChunk(t *testing.T) {
	for _, c := range []struct {
		left    uint64
		threads int
		most    uint32
		want    uint32
	}{
		{600_000, 1, 1 << 18, 1 << 18}, // capped
		{600_000, 2, 1 << 20, 300_000}, // each thread its half
		{10, 1, 1 << 18, minChunk},     // never below the minimum
		{100_000, 0, 1 << 18, 100_000}, // no threads counts as one
		{1 << 30, 1, 100, minChunk},    // a maximum below the minimum
	} {
		if got := chunk(c.left, c.threads, c.most); got != c.want {
			t.Errorf("chunk(%d, %d, %d) = %d, want %d", c.left, c.threads, c.most, got, c.want)
		}
	}
}

func TestShellLine(t *testing.T) {
	got := shellLine([]string{"ip", "netns", "exec", "ns1", "sh", "-c", "echo 1 > /sys/x; echo 'a'", ""})
	want := `ip netns exec ns1 sh -c 'echo 1 > /sys/x; echo '\''a'\''' ''`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestPortTable(t *testing.T) {
	b, err := portTable([]uint16{20000, 20001, 443})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 2*portSlots {
		t.Fatalf("%d bytes, want %d", len(b), 2*portSlots)
	}
	count := map[uint16]int{}
	for i := range portSlots {
		p := binary.BigEndian.Uint16(b[2*i:]) // network byte order
		if want := []uint16{20000, 20001, 443}[i%3]; p != want {
			t.Fatalf("slot %d: port %d, want %d", i, p, want)
		}
		count[p]++
	}
	// 4096 = 3*1365 + 1: the first port has one slot more.
	if count[20000] != 1366 || count[20001] != 1365 || count[443] != 1365 {
		t.Errorf("slots per port %v", count)
	}
	for _, ports := range [][]uint16{nil, make([]uint16, portSlots+1)} {
		if _, err := portTable(ports); err == nil {
			t.Errorf("%d ports: no error", len(ports))
		}
	}
}

func TestGeneratorInsnsPortTable(t *testing.T) {
	f, err := udpFrame(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	insns, err := generatorInsns(f, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	// With a table the program writes the destination port, never the
	// source port, and reads the table's value directly (no helper).
	var dport, sport, tableLoads int
	for _, ins := range insns {
		if ins.OpCode.Class().IsStore() && ins.Dst == asm.R2 && ins.OpCode.Size() == asm.Half {
			switch ins.Offset {
			case udpDportOff:
				dport++
			case udpSportOff:
				sport++
			}
		}
		if ins.IsLoadFromMap() && ins.Src == asm.PseudoMapValue {
			tableLoads++
		}
	}
	if dport != 1 || sport != 0 || tableLoads != 1 {
		t.Errorf("destination port stores %d, source port stores %d, table loads %d; want 1, 0, 1", dport, sport, tableLoads)
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatalf("marshal: %v", err)
	}
}

// TestGeneratorInKernel loads the generator in both modes and runs it on
// the template (BPF_PROG_TEST_RUN, not live): every frame leaves with
// the template's headers and a port from the right set, the verifier
// accepts the table read, and the counter counts.
func TestGeneratorInKernel(t *testing.T) {
	if !testenv.Privileged() {
		t.Skip("needs root: loads BPF programs")
	}
	spec := testSpec()
	f, err := udpFrame(spec)
	if err != nil {
		t.Fatal(err)
	}
	table := []uint16{20000, 20007, 31999}
	for _, mode := range []struct {
		name   string
		dports []uint16
	}{{"source ports", nil}, {"port table", table}} {
		t.Run(mode.name, func(t *testing.T) {
			g, err := newGenerator(f, mode.dports)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			seen := map[uint16]bool{}
			const runs = 200
			for range runs {
				out := make([]byte, len(f))
				ret, err := g.prog.Run(&ebpf.RunOptions{Data: f, DataOut: out})
				if err != nil {
					t.Fatal(err)
				}
				if ret != 3 { // XDP_TX
					t.Fatalf("returned %d, want XDP_TX", ret)
				}
				sp, dp := binary.BigEndian.Uint16(out[udpSportOff:]), binary.BigEndian.Uint16(out[udpDportOff:])
				if mode.dports == nil {
					if dp != spec.Dport || sp < sportBase || sp >= sportBase+1<<sportBits {
						t.Fatalf("ports %d → %d: want a source port in the flows' range and %d", sp, dp, spec.Dport)
					}
					seen[sp] = true
				} else {
					if sp != spec.Sport || !slices.Contains(table, dp) {
						t.Fatalf("ports %d → %d: want %d → one of %v", sp, dp, spec.Sport, table)
					}
					seen[dp] = true
				}
				// Everything else is the template's.
				copy(out[udpSportOff:udpSportOff+4], f[udpSportOff:udpSportOff+4])
				if !bytes.Equal(out, f) {
					t.Fatalf("frame\n%x\nwant the template\n%x", out, f)
				}
			}
			if mode.dports != nil && len(seen) != len(table) || mode.dports == nil && len(seen) < 100 {
				t.Errorf("%d different ports in %d frames", len(seen), runs)
			}
			if n, err := g.sent(); err != nil || n != runs {
				t.Errorf("counter %d (%v), want %d", n, err, runs)
			}
		})
	}
}
