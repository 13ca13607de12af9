package lb

import (
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// statefulFixture is a fixture LB with a stateful service whose table can
// be pointed at one backend or another.
type statefulFixture struct {
	d     *Dataplane
	f     *fixtureNS
	svc   Service
	addrs map[uint32]netip.Addr
}

func newStatefulFixture(t *testing.T, key ServiceKey) *statefulFixture {
	t.Helper()
	d, f := newFixtureLB(t)
	s := &statefulFixture{d: d, f: f, addrs: map[uint32]netip.Addr{
		20: netip.MustParseAddr("10.0.3.20"), 21: netip.MustParseAddr("10.0.3.21"),
	}}
	for id, a := range s.addrs {
		if err := d.UpsertBackend(id, apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	s.svc = Service{ID: 12, Key: key, Encap: EncapIPIP, Stateful: true}
	s.point(t, 20)
	return s
}

// point makes every slot of the service's table name backend id.
func (s *statefulFixture) point(t *testing.T, id uint32) {
	t.Helper()
	s.svc.Table = make([]uint32, fxTableSize)
	for i := range s.svc.Table {
		s.svc.Table[i] = id
	}
	if err := s.d.UpsertService(s.svc); err != nil {
		t.Fatal(err)
	}
}

// send runs one frame and returns the backend it was forwarded to and
// the reasons it counted.
func (s *statefulFixture) send(t *testing.T, frame []byte) (netip.Addr, map[string]uint64) {
	t.Helper()
	var v uint32
	var out []byte
	delta := reasonDelta(t, s.d, func() { v, out = s.f.Run(t, s.d.objs.XlbLbProg, frame) })
	if v != xdpTX {
		t.Fatalf("verdict %s reasons %v, want TX", verdictNames[v], delta)
	}
	return netip.AddrFrom4([4]byte(out[30:34])), delta
}

func (s *statefulFixture) entries(t *testing.T) int {
	t.Helper()
	n, err := s.d.ConntrackEntries()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func sameReasons(got map[string]uint64, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if got[w] != 1 {
			return false
		}
	}
	return true
}

// TestLBStatefulTCP: a stateful service's TCP flows keep the backend
// their SYN got, whatever the table says later, also through another SYN
// of the same 5-tuple while that backend is in the service; a segment of
// a flow the LB never saw follows the table and is counted.
func TestLBStatefulTCP(t *testing.T) {
	s := newStatefulFixture(t, ServiceKey{fxVIP, 8080, ProtoTCP})
	flow := func(sport uint16, flags uint8) []byte {
		p := tcpTo(fxVIP, 8080)
		p.Sport, p.TCPFlags = sport, flags
		return p.Frame(s.f.MAC)
	}
	if n := s.entries(t); n != 0 {
		t.Fatalf("%d conntrack entries before any packet", n)
	}
	if got, r := s.send(t, flow(1000, tcpSYN)); got != s.addrs[20] || !sameReasons(r, "note_ct_new") {
		t.Fatalf("SYN: to %v reasons %v, want %v and note_ct_new", got, r, s.addrs[20])
	}
	if got, r := s.send(t, flow(1000, tcpACK)); got != s.addrs[20] || len(r) != 0 {
		t.Fatalf("ACK: to %v reasons %v, want %v and none", got, r, s.addrs[20])
	}
	if n := s.entries(t); n != 1 {
		t.Errorf("%d conntrack entries after one flow, want 1", n)
	}

	s.point(t, 21)
	if got, r := s.send(t, flow(1000, tcpACK)); got != s.addrs[20] || len(r) != 0 {
		t.Errorf("after the table moved: to %v reasons %v, want the flow's backend %v and none", got, r, s.addrs[20])
	}
	// SYN+ACK does not open a connection: the entry holds.
	if got, _ := s.send(t, flow(1000, tcpSYN|tcpACK)); got != s.addrs[20] {
		t.Errorf("SYN+ACK: to %v, want the flow's backend %v", got, s.addrs[20])
	}
	// A SYN of the same 5-tuple (forged, or a client that reuses its
	// port) does not move the flow while its backend is in the service
	// (TestLBStatefulSYNKeepsLiveFlow).
	if got, r := s.send(t, flow(1000, tcpSYN)); got != s.addrs[20] || len(r) != 0 {
		t.Errorf("a new SYN of the same 5-tuple: to %v reasons %v, want the flow's backend %v and none", got, r, s.addrs[20])
	}
	if got, _ := s.send(t, flow(1000, tcpACK)); got != s.addrs[20] {
		t.Errorf("after the new SYN: to %v, want %v", got, s.addrs[20])
	}

	if got, r := s.send(t, flow(2000, tcpACK)); got != s.addrs[21] || !sameReasons(r, "note_ct_midflow_miss", "note_ct_new") {
		t.Errorf("mid-flow segment of an unknown flow: to %v reasons %v, want the table's %v, note_ct_midflow_miss and note_ct_new", got, r, s.addrs[21])
	}
	if n := s.entries(t); n != 2 {
		t.Errorf("%d conntrack entries after two flows, want 2", n)
	}

	// A flow whose backend left the configuration keeps going to it,
	// as a stateful load balancer drains a removed backend, also once
	// its id is another backend's; the id's counters do not count it.
	s.point(t, 20)
	if err := s.d.DeleteBackend(21); err != nil {
		t.Fatal(err)
	}
	if got, r := s.send(t, flow(2000, tcpACK)); got != s.addrs[21] || len(r) != 0 {
		t.Errorf("flow of a deleted backend: to %v reasons %v, want still %v and none", got, r, s.addrs[21])
	}
	if err := s.d.UpsertBackend(21, apOf(s.addrs[20])); err != nil {
		t.Fatal(err)
	}
	before, err := s.d.BackendCounters(21)
	if err != nil {
		t.Fatal(err)
	}
	if got, r := s.send(t, flow(2000, tcpACK)); got != s.addrs[21] || len(r) != 0 {
		t.Errorf("flow of a deleted backend whose id was reused: to %v reasons %v, want still %v and none", got, r, s.addrs[21])
	}
	if after, err := s.d.BackendCounters(21); err != nil || after != before {
		t.Errorf("the reused id counted the orphaned flow: %+v → %+v (%v)", before, after, err)
	}
	if got, _ := s.send(t, flow(2000, tcpSYN)); got != s.addrs[20] {
		t.Errorf("a new SYN of the orphaned 5-tuple: to %v, want the table's %v", got, s.addrs[20])
	}

	svcs, err := servicesOf(s.d)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range svcs {
		if x.Stateful != (x.ID == s.svc.ID) {
			t.Errorf("service %d reported stateful %v", x.ID, x.Stateful)
		}
	}
}

// TestLBStatefulSYNKeepsLiveFlow: a SYN forged with the address and port
// of a live client (no sequence numbers needed) must not move the live
// connection to the backend the table names now: a flow's entry holds
// while its backend is in the service, SYN or not. Only once the
// backend has left may a SYN of the 5-tuple be picked from the table
// again, and recorded.
func TestLBStatefulSYNKeepsLiveFlow(t *testing.T) {
	s := newStatefulFixture(t, ServiceKey{fxVIP, 8080, ProtoTCP})
	p := tcpTo(fxVIP, 8080)
	p.Sport = 1000
	seg := func(flags uint8) []byte {
		q := p
		q.TCPFlags = flags
		return q.Frame(s.f.MAC)
	}
	key := wire.CtKey{Saddr: wire.AddrOf(p.Src), Daddr: wire.AddrOf(fxVIP), Sport: wire.Port(p.Sport), Dport: wire.Port(8080), Proto: 6}
	entry := func() netip.Addr {
		t.Helper()
		var e wire.CtEntry
		if err := s.d.objs.Conntrack.Lookup(&key, &e); err != nil {
			t.Fatalf("the flow's entry: %v", err)
		}
		return e.Addr.IP()
	}
	a, b := s.addrs[20], s.addrs[21]

	if got, _ := s.send(t, seg(tcpSYN)); got != a {
		t.Fatalf("SYN: to %v, want %v", got, a)
	}
	if got, _ := s.send(t, seg(tcpACK)); got != a {
		t.Fatalf("ACK: to %v, want %v", got, a)
	}
	// The table moves the flow's slot to B; A stays in the service.
	s.point(t, 21)
	for i := range 3 {
		if got, r := s.send(t, seg(tcpSYN)); got != a || len(r) != 0 {
			t.Errorf("SYN %d of the live flow's 5-tuple after its slot moved: to %v reasons %v, want its backend %v and none", i+1, got, r, a)
		}
	}
	if e := entry(); e != a {
		t.Errorf("after the SYNs the entry names %v, want %v", e, a)
	}
	if got, _ := s.send(t, seg(tcpACK)); got != a {
		t.Errorf("the live flow's next segment: to %v, want %v", got, a)
	}

	// A leaves the service: its flows go on to it as orphans, until a
	// SYN of the 5-tuple opens a connection there again, which the
	// table decides and the entry records.
	if err := s.d.DeleteBackend(20); err != nil {
		t.Fatal(err)
	}
	if got, r := s.send(t, seg(tcpACK)); got != a || len(r) != 0 {
		t.Errorf("segment of the orphaned flow: to %v reasons %v, want still %v and none", got, r, a)
	}
	if got, r := s.send(t, seg(tcpSYN)); got != b || !sameReasons(r, "note_ct_new") {
		t.Errorf("SYN of the orphaned flow's 5-tuple: to %v reasons %v, want the table's %v and note_ct_new", got, r, b)
	}
	if e := entry(); e != b {
		t.Errorf("after the SYN re-picked the entry names %v, want %v", e, b)
	}
	if got, _ := s.send(t, seg(tcpACK)); got != b {
		t.Errorf("the new connection's next segment: to %v, want %v", got, b)
	}
	if n := s.entries(t); n != 1 {
		t.Errorf("%d conntrack entries, want 1", n)
	}
}

// TestLBStatefulUDPAndICMP: UDP flows are recorded by their first
// packet; an ICMP error about a flow follows its entry and never makes
// one.
func TestLBStatefulUDPAndICMP(t *testing.T) {
	s := newStatefulFixture(t, ServiceKey{fxVIP, 5300, ProtoUDP})
	udp := pkt{Src: fxClient, Dst: fxVIP, Sport: 5353, Dport: 5300, Proto: 17, Payload: []byte("q")}
	if got, r := s.send(t, udp.Frame(s.f.MAC)); got != s.addrs[20] || !sameReasons(r, "note_ct_new") {
		t.Fatalf("first datagram: to %v reasons %v, want %v and note_ct_new", got, r, s.addrs[20])
	}
	s.point(t, 21)
	if got, r := s.send(t, udp.Frame(s.f.MAC)); got != s.addrs[20] || len(r) != 0 {
		t.Errorf("after the table moved: to %v reasons %v, want %v and none", got, r, s.addrs[20])
	}

	// A router's ICMP error about a reply the backend sent from
	// VIP:5300 to the client's 5353.
	icmp := icmpAboutUDP(s.f.MAC, fxVIP, fxClient, 5300, 5353)
	if got, r := s.send(t, icmp); got != s.addrs[20] || !sameReasons(r, "note_icmp_to_backend") {
		t.Errorf("ICMP error about the flow: to %v reasons %v, want its backend %v and note_icmp_to_backend", got, r, s.addrs[20])
	}
	unknown := icmpAboutUDP(s.f.MAC, fxVIP, fxClient, 5300, 6000)
	if got, r := s.send(t, unknown); got != s.addrs[21] || !sameReasons(r, "note_icmp_to_backend") {
		t.Errorf("ICMP error about an unknown flow: to %v reasons %v, want the table's %v and note_icmp_to_backend", got, r, s.addrs[21])
	}
	if n := s.entries(t); n != 1 {
		t.Errorf("%d conntrack entries, want 1: ICMP errors make none", n)
	}
}

// TestLBStatelessMakesNoEntries: services that are not stateful leave
// the conntrack table alone, and a service stops being stateful on
// request.
func TestLBStatelessMakesNoEntries(t *testing.T) {
	s := newStatefulFixture(t, ServiceKey{fxVIP, 8080, ProtoTCP})
	s.svc.Stateful = false
	s.point(t, 20)
	p := tcpTo(fxVIP, 8080)
	p.TCPFlags = tcpSYN
	if got, r := s.send(t, p.Frame(s.f.MAC)); got != s.addrs[20] || len(r) != 0 {
		t.Errorf("SYN to a stateless service: to %v reasons %v, want %v and none", got, r, s.addrs[20])
	}
	if _, r := s.send(t, tcpTo(fxVIP, 80).Frame(s.f.MAC)); len(r) != 0 {
		t.Errorf("fixture service: reasons %v, want none", r)
	}
	if n := s.entries(t); n != 0 {
		t.Errorf("%d conntrack entries from stateless services, want 0", n)
	}
}

// icmpAboutUDP is icmpAbout for a UDP reply.
func icmpAboutUDP(mac []byte, vip, client netip.Addr, vport, cport uint16) []byte {
	f := icmpAbout(mac, 3, 4, vip, client, vport, cport)
	// The quoted header's protocol: UDP. Its checksum is not checked.
	f[14+20+8+9] = 17
	return f
}
