package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

const procStat1 = `cpu  672335 41683 426661 2277900 10343 0 29815 1192 0 0
cpu0 327285 20625 178954 1187356 2396 0 14254 586 0 0
cpu1 345050 21057 247706 1090543 7947 0 15561 606 0 0
intr 1 2 3
ctxt 12345
`

const procStat2 = `cpu  672372 41683 426662 2277900 10343 0 29815 1192 0 0
cpu0 327304 20625 178954 1187390 2396 0 14300 586 0 0
cpu1 345067 21057 247707 1090543 7947 0 15561 610 0 0
`

func TestParseProcStatAndDelta(t *testing.T) {
	a, err := parseProcStat(strings.NewReader(procStat1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseProcStat(strings.NewReader(procStat2))
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("CPUs: %d and %d, want 2 (the summary line is not a CPU)", len(a), len(b))
	}
	if a[1] != (cpuTimes{345050, 21057, 247706, 1090543, 7947, 0, 15561, 606}) {
		t.Fatalf("cpu1 = %+v", a[1])
	}
	d := b[0].sub(a[0])
	want := cpuTimes{User: 19, Idle: 34, SoftIRQ: 46}
	if d != want {
		t.Fatalf("cpu0 delta %+v, want %+v", d, want)
	}
	if d.busy() != 65 || d.total() != 99 {
		t.Fatalf("busy %d total %d, want 65 and 99", d.busy(), d.total())
	}
	// A counter that went backwards counts as zero, not as a huge
	// unsigned difference.
	if back := a[0].sub(b[0]); back.User != 0 || back.SoftIRQ != 0 {
		t.Fatalf("backwards delta %+v, want zeros", back)
	}
}

func TestParseProcStatErrors(t *testing.T) {
	for name, in := range map[string]string{
		"no CPU lines":  "cpu  1 2 3 4 5 6 7 8\nintr 1\n",
		"short line":    "cpu0 1 2 3\n",
		"not a number":  "cpu0 1 2 x 4 5 6 7 8\n",
		"empty":         "",
		"only non-cpus": "btime 1\nprocesses 2\n",
	} {
		if _, err := parseProcStat(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

const snmpText = `Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 1 64 1236 0 0 1230 0 2 6 6 3 1 0 0 0 0 0 0 0 1242
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs
Icmp: 5 0 0 5
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 17 1216 900 0 880 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
`

func TestParseSNMP(t *testing.T) {
	s, err := parseSNMP(strings.NewReader(snmpText))
	if err != nil {
		t.Fatal(err)
	}
	if want := (ipCounters{InReceives: 1236, ForwDatagrams: 1230, InDiscards: 2, OutDiscards: 3, OutNoRoutes: 1}); s.IP != want {
		t.Errorf("Ip %+v, want %+v", s.IP, want)
	}
	if want := (udpCounters{InDatagrams: 17, NoPorts: 1216, InErrors: 900, RcvbufErrors: 880}); s.UDP != want {
		t.Errorf("Udp %+v, want %+v", s.UDP, want)
	}
	if s.UDP.delivered() != 897 {
		t.Errorf("delivered %d, want 897 (queued + dropped at the full socket)", s.UDP.delivered())
	}
}

func TestParseSNMPErrors(t *testing.T) {
	for name, in := range map[string]string{
		"no Udp":          "Ip: InReceives ForwDatagrams InDiscards OutDiscards OutNoRoutes\nIp: 1 2 3 4 5\n",
		"value count":     "Udp: InDatagrams NoPorts\nUdp: 1\n",
		"negative number": strings.Replace(snmpText, "Udp: 17", "Udp: -17", 1),
	} {
		if _, err := parseSNMP(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	v, err := parseSchedstat([]byte("235512345 1200 33\n"))
	if err != nil || v != 235512345 {
		t.Fatalf("got %d, %v; want 235512345", v, err)
	}
	for _, in := range []string{"", "x 1 2"} {
		if _, err := parseSchedstat([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestWaitQuiet(t *testing.T) {
	// The counter grows for three reads, then stays: waitQuiet returns
	// once it has seen the same value twice in a row.
	vals := []uint64{1, 5, 9, 9, 9, 9}
	i := 0
	read := func() (uint64, error) {
		v := vals[min(i, len(vals)-1)]
		i++
		return v, nil
	}
	if err := waitQuiet(context.Background(), time.Millisecond, time.Second, read); err != nil {
		t.Fatal(err)
	}
	if i != 4 {
		t.Fatalf("%d reads, want 4", i)
	}
	// A counter that never settles gives up at the limit, without error.
	n := uint64(0)
	start := time.Now()
	err := waitQuiet(context.Background(), time.Millisecond, 30*time.Millisecond, func() (uint64, error) { n++; return n, nil })
	if err != nil || time.Since(start) > time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
}
