package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf/asm"
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
	insns, err := generatorInsns(f, 3)
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
	if _, err := generatorInsns(make([]byte, 20), 3); err == nil {
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
