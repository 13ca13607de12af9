package l2

import (
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/l2/elect"
)

type fakeDP struct {
	owned   []netip.Addr
	expires time.Duration
	calls   int
}

func (f *fakeDP) SetL2Owned(owned []netip.Addr, _ net.HardwareAddr, expires time.Duration) error {
	f.owned, f.expires = slices.Clone(owned), expires
	f.calls++
	return nil
}

// newTestSpeaker is a Speaker for node a of a, b, c with no sockets: a
// fake data plane, clocks and gratuitous ARP sender.
func newTestSpeaker(t *testing.T) (*Speaker, *fakeDP, *time.Time, *[]netip.Addr) {
	t.Helper()
	dp := &fakeDP{}
	now := time.Unix(1000, 0)
	var sent []netip.Addr
	s := &Speaker{cfg: config.L2{NodeName: "a", Heartbeat: 100 * time.Millisecond, DeadAfter: 400 * time.Millisecond},
		mac: net.HardwareAddr{2, 0, 0, 0, 0, 1}, dp: dp, log: slog.New(slog.DiscardHandler),
		mono:    func() (time.Duration, error) { return now.Sub(time.Unix(0, 0)), nil },
		now:     func() time.Time { return now },
		garp:    func(v netip.Addr) error { sent = append(sent, v); return nil },
		closeG:  func() {},
		elector: &heartbeats{deadAfter: 400 * time.Millisecond},
		since:   map[netip.Addr]time.Time{}, garpAt: map[netip.Addr]time.Time{}, garpN: map[netip.Addr]int{}}
	return s, dp, &now, &sent
}

// vipsOwnedBy finds n VIPs that node owner owns among alive.
func vipsOwnedBy(owner string, alive []string, n int) []netip.Addr {
	var out []netip.Addr
	for i := 1; len(out) < n; i++ {
		v := netip.AddrFrom4([4]byte{10, 99, 0, byte(i)})
		if elect.Owner(v, alive) == owner {
			out = append(out, v)
		}
	}
	return out
}

func routesOf(vips []netip.Addr, serve bool) []announce.Route {
	var out []announce.Route
	for _, v := range vips {
		r := announce.Route{Prefix: netip.PrefixFrom(v, 32), Serve: serve}
		if !serve {
			r.Why = "no healthy backend"
		}
		out = append(out, r)
	}
	return out
}

func TestSpeakerAnswersForItsShare(t *testing.T) {
	s, dp, now, sent := newTestSpeaker(t)
	abc := []string{"a", "b", "c"}
	mine := vipsOwnedBy("a", abc, 2)
	theirs := append(vipsOwnedBy("b", abc, 2), vipsOwnedBy("c", abc, 2)...)
	unserved := vipsOwnedBy("a", []string{"a", "b", "c"}, 3)[2:]
	routes := append(append(routesOf(mine, true), routesOf(theirs, true)...), routesOf(unserved, false)...)
	if err := s.Sync(routes); err != nil || dp.calls != 0 {
		t.Fatalf("Sync before Run programmed the data plane (%d calls, %v)", dp.calls, err)
	}
	if err := s.apply(abc); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dp.owned, mine) {
		t.Errorf("answering for %v, want %v (its share, served)", dp.owned, mine)
	}
	if want := now.Sub(time.Unix(0, 0)) + 400*time.Millisecond; dp.expires != want {
		t.Errorf("entries expire at %v, want now + deadAfter %v", dp.expires, want)
	}
	if !slices.Equal(*sent, mine) {
		t.Errorf("gratuitous ARP at once for %v, want %v", *sent, mine)
	}

	// b dies: a takes over the VIPs b had that a now owns, at once
	// announced by gratuitous ARP.
	*sent = nil
	ac := []string{"a", "c"}
	var want, gained []netip.Addr
	for _, v := range append(slices.Clone(mine), theirs...) {
		if elect.Owner(v, ac) == "a" {
			want = append(want, v)
			if !slices.Contains(mine, v) {
				gained = append(gained, v)
			}
		}
	}
	if len(gained) == 0 {
		t.Fatal("the fixture gives a none of b's VIPs")
	}
	*now = now.Add(100 * time.Millisecond)
	if err := s.apply(ac); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dp.owned, want) {
		t.Errorf("after b died: answering for %v, want %v", dp.owned, want)
	}
	if !slices.Equal(*sent, gained) {
		t.Errorf("gratuitous ARP for %v, want the gained %v alone (mine's second is due at 250ms)", *sent, gained)
	}

	// Each gained VIP gets GARPSchedule's sends in all, then no more.
	count := map[netip.Addr]int{}
	for _, v := range *sent {
		count[v]++
	}
	for range 50 {
		*now = now.Add(100 * time.Millisecond)
		*sent = nil
		if err := s.apply(ac); err != nil {
			t.Fatal(err)
		}
		for _, v := range *sent {
			count[v]++
		}
	}
	for _, v := range want {
		if count[v] != len(GARPSchedule) && !slices.Contains(mine, v) {
			t.Errorf("%s: %d gratuitous ARPs after the gain, want %d", v, count[v], len(GARPSchedule))
		}
	}

	// Leaving: nothing answered, and later heartbeats change nothing.
	s.elector = nil
	s.left = true
	if err := s.dp.SetL2Owned(nil, s.mac, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.apply(abc); err != nil || len(dp.owned) != 0 {
		t.Errorf("after leaving: answering for %v (%v)", dp.owned, err)
	}
}

func TestGratuitousARPFrame(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0x5e, 0, 0, 7}
	got := GratuitousARP(mac, netip.MustParseAddr("10.99.0.1"))
	want := []byte{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0x5e, 0, 0, 7, 0x08, 0x06, // broadcast, from mac, ARP
		0, 1, 0x08, 0, 6, 4, 0, 1, // Ethernet, IPv4, request
		2, 0, 0x5e, 0, 0, 7, 10, 99, 0, 1, // sender: mac, the VIP
		0, 0, 0, 0, 0, 0, 10, 99, 0, 1, // target: the VIP
	}
	if !slices.Equal(got, want) {
		t.Errorf("frame\n%x\nwant\n%x", got, want)
	}
}

func TestUnsolicitedNAFrame(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0x5e, 0, 0, 7}
	got := UnsolicitedNA(mac, netip.MustParseAddr("fd00:99::1"))
	want := []byte{
		0x33, 0x33, 0, 0, 0, 1, 2, 0, 0x5e, 0, 0, 7, 0x86, 0xdd, // to all nodes, from mac, IPv6
		0x60, 0, 0, 0, 0, 32, 58, 255, // payload 32, ICMPv6, hop limit 255
		0xfd, 0, 0, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // from the VIP
		0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // to ff02::1
		136, 0, 0, 0, 0x20, 0, 0, 0, // advertisement, checksum (below), override
		0xfd, 0, 0, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // target: the VIP
		2, 1, 2, 0, 0x5e, 0, 0, 7, // target link-layer address: mac
	}
	if len(got) != len(want) {
		t.Fatalf("frame of %d bytes, want %d:\n%x", len(got), len(want), got)
	}
	// The checksum verifies: summed with it, the message and the
	// pseudo-header give 0xffff.
	if icmp6Checksum(got[22:38], got[38:54], got[54:]) != 0 {
		t.Errorf("checksum %x does not verify", got[56:58])
	}
	copy(want[56:58], got[56:58])
	if !slices.Equal(got, want) {
		t.Errorf("frame\n%x\nwant\n%x", got, want)
	}
}

// An IPv6 VIP is answered (neighbour discovery) and announced like an
// IPv4 one.
func TestSpeakerIPv6VIP(t *testing.T) {
	s, dp, _, sent := newTestSpeaker(t)
	var joined []netip.Addr
	s.join = func(v []netip.Addr) error { joined = v; return nil }
	vip := netip.MustParseAddr("fd00:99::1")
	if err := s.Sync([]announce.Route{{Prefix: netip.PrefixFrom(vip, 128), Serve: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.apply([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dp.owned, []netip.Addr{vip}) || !slices.Equal(*sent, []netip.Addr{vip}) || !slices.Equal(joined, []netip.Addr{vip}) {
		t.Errorf("answering for %v, announced %v, groups of %v; want %s for each", dp.owned, *sent, joined, vip)
	}
}

// Each family's VIP is announced with its own frame, to its own group.
func TestAnnouncement(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0x5e, 0, 0, 7}
	for _, c := range []struct {
		vip   string
		proto uint16
		to    string
		frame []byte
	}{
		{"10.99.0.1", 0x0806, "ff:ff:ff:ff:ff:ff", GratuitousARP(mac, netip.MustParseAddr("10.99.0.1"))},
		{"fd00:99::1", 0x86dd, "33:33:00:00:00:01", UnsolicitedNA(mac, netip.MustParseAddr("fd00:99::1"))},
	} {
		frame, proto, to, _ := announcement(mac, netip.MustParseAddr(c.vip))
		if proto != c.proto || to.String() != c.to || !slices.Equal(frame, c.frame) {
			t.Errorf("%s: EtherType %#x to %s, %x; want %#x to %s, %x", c.vip, proto, to, frame, c.proto, c.to, c.frame)
		}
	}
}

// fakeElection is an election whose owners and validity the test sets,
// as the Lease election's are.
type fakeElection struct {
	heartbeats
	owner    map[netip.Addr]string
	valid    time.Duration
	servable []netip.Addr
}

func (f *fakeElection) Owner(v netip.Addr, _ []string) string { return f.owner[v] }
func (f *fakeElection) ValidFor() time.Duration               { return f.valid }
func (f *fakeElection) SetServable(v []netip.Addr)            { f.servable = slices.Clone(v) }

// With an election that decides owners itself (Leases), the speaker
// tells it what this node can serve, answers for what it owns only for
// as long as the election says its claim holds, and for nothing once
// the claim has lapsed (a node cut off from the API server).
func TestSpeakerFollowsElectionValidity(t *testing.T) {
	s, dp, now, _ := newTestSpeaker(t)
	ip := netip.MustParseAddr
	e := &fakeElection{owner: map[netip.Addr]string{ip("10.99.0.1"): "a", ip("10.99.0.2"): "b"}, valid: 300 * time.Millisecond}
	s.elector = e
	routes := append(routesOf([]netip.Addr{ip("10.99.0.1"), ip("10.99.0.2")}, true), routesOf([]netip.Addr{ip("10.99.0.3")}, false)...)
	if err := s.Sync(routes); err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{ip("10.99.0.1"), ip("10.99.0.2")}; !slices.Equal(e.servable, want) {
		t.Errorf("the election was told this node serves %v, want %v", e.servable, want)
	}
	if err := s.apply([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{ip("10.99.0.1")}; !slices.Equal(dp.owned, want) {
		t.Errorf("answering for %v, want %v", dp.owned, want)
	}
	if want := now.Sub(time.Unix(0, 0)) + 300*time.Millisecond; dp.expires != want {
		t.Errorf("entries expire at %v, want now + the claim's remaining %v", dp.expires, want)
	}
	e.valid = 0
	if err := s.apply([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if len(dp.owned) != 0 {
		t.Errorf("with the claim lapsed: answering for %v, want nothing", dp.owned)
	}
}
