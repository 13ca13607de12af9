package lease

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/xlbproject/xlb/internal/l2/elect"
)

const dead = 800 * time.Millisecond

var ip = netip.MustParseAddr

// vipOwnedBy finds a VIP that owner owns among nodes by rendezvous
// hashing.
func vipOwnedBy(t *testing.T, owner string, nodes []string) netip.Addr {
	t.Helper()
	for i := 1; i < 255; i++ {
		v := netip.AddrFrom4([4]byte{10, 99, 0, byte(i)})
		if elect.Owner(v, nodes) == owner {
			return v
		}
	}
	t.Fatalf("no VIP of 10.99.0.0/24 is %s's among %v", owner, nodes)
	return netip.Addr{}
}

// A stopped node (its Lease no longer changes) is declared dead a dead
// time after this node last saw its Lease change, by this node's clock,
// and its VIPs go to the next node that can serve them; a node that
// cannot serve a VIP never gets it; this node owns nothing once its own
// renewals lapse, and a deleted Lease (a node leaving) moves the VIPs at
// once.
func TestMembersFailover(t *testing.T) {
	t0 := time.Unix(1000, 0)
	abc := []string{"a", "b", "c"}
	vipB := vipOwnedBy(t, "b", abc)
	onlyC := vipOwnedBy(t, "a", abc) // a's by hash, but only c can serve it
	m := NewMembers("a", dead)
	m.SetServable([]netip.Addr{vipB})
	if len(m.Alive(t0)) != 0 || m.ValidFor(t0) > 0 {
		t.Fatalf("before any renewal: alive %v, valid %v; want none", m.Alive(t0), m.ValidFor(t0))
	}
	m.Renewed(t0)
	// The others' Leases carry rvs from their writers; b serves vipB,
	// c serves both.
	m.Observe("b", "1", []netip.Addr{vipB}, t0)
	m.Observe("c", "1", []netip.Addr{vipB, onlyC}, t0)
	if got := m.Alive(t0); !slices.Equal(got, abc) {
		t.Fatalf("alive %v, want %v", got, abc)
	}
	if o := m.Owner(vipB, m.Alive(t0)); o != "b" {
		t.Errorf("owner of %s = %q, want b", vipB, o)
	}
	if o := m.Owner(onlyC, m.Alive(t0)); o != "c" {
		t.Errorf("owner of %s = %q, want c: the only node that can serve it", onlyC, o)
	}

	// a and c keep renewing every 200ms; b stops at t0.
	now := t0
	for i := 1; i <= 3; i++ {
		now = t0.Add(time.Duration(i) * 200 * time.Millisecond)
		m.Renewed(now)
		m.Observe("c", string(rune('1'+i)), []netip.Addr{vipB, onlyC}, now)
		m.Observe("b", "1", []netip.Addr{vipB}, now) // the same version: no renewal
	}
	if got := m.Alive(now); !slices.Equal(got, abc) {
		t.Errorf("600ms after b's last renewal: alive %v, want %v (dead only after %v)", got, abc, dead)
	}
	now = t0.Add(dead)
	m.Renewed(now)
	alive := m.Alive(now)
	if !slices.Equal(alive, []string{"a", "c"}) {
		t.Fatalf("a dead time after b's last renewal: alive %v, want [a c]", alive)
	}
	if o := m.Owner(vipB, alive); o == "b" || o == "" {
		t.Errorf("owner of %s after b died = %q, want a or c", vipB, o)
	}

	// b comes back (a new version): its VIP returns to it.
	m.Observe("b", "9", []netip.Addr{vipB}, now)
	if o := m.Owner(vipB, m.Alive(now)); o != "b" {
		t.Errorf("b renewing again: owner %q, want b", o)
	}
	// c leaves (deletes its Lease): at once gone.
	m.Gone("c")
	if o := m.Owner(onlyC, m.Alive(now)); o != "" {
		t.Errorf("with c gone, %s is owned by %q; want nobody (no other node can serve it)", onlyC, o)
	}

	// a's own renewals stop: a dead time after the last one was sent, a
	// owns nothing, exactly when the others may take over.
	last := now
	later := last.Add(dead - time.Millisecond)
	if v := m.ValidFor(later); v != time.Millisecond {
		t.Errorf("valid %v before the claim lapses, want 1ms", v)
	}
	if m.ValidFor(last.Add(dead)) > 0 || slices.Contains(m.Alive(last.Add(dead)), "a") {
		t.Errorf("a dead time after a's last renewal: valid %v, alive %v; want a out", m.ValidFor(last.Add(dead)), m.Alive(last.Add(dead)))
	}
}

// A node that starts, or resumes after a stop, counts every other node as
// seen now: it takes no VIP of a live node before it could see it renew,
// and a dead node's a dead time later.
func TestMembersStartAndRestart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ab := []string{"a", "b"}
	vipB := vipOwnedBy(t, "b", ab)
	m := NewMembers("a", dead)
	m.SetServable([]netip.Addr{vipB})
	m.Renewed(t0)
	m.Observe("b", "1", []netip.Addr{vipB}, t0) // b's Lease, last renewed long ago
	if o := m.Owner(vipB, m.Alive(t0.Add(dead/2))); o != "b" {
		t.Errorf("just started: owner %q, want b until a dead time passed", o)
	}
	m.Renewed(t0.Add(dead))
	if o := m.Owner(vipB, m.Alive(t0.Add(dead))); o != "a" {
		t.Errorf("a dead time after start with b silent: owner %q, want a", o)
	}
	// a is stopped for 5s; on resume it renews and restarts its view.
	resume := t0.Add(5 * time.Second)
	m.Renewed(resume)
	m.Restart(resume)
	if o := m.Owner(vipB, m.Alive(resume)); o != "b" {
		t.Errorf("resumed: owner %q, want b until b could be seen again", o)
	}
}

func TestLeaseNames(t *testing.T) {
	for v, want := range map[string]string{
		"10.99.0.1":        "xlb-l2-vip-10-99-0-1",
		"::ffff:10.99.0.1": "xlb-l2-vip-10-99-0-1",
		"fd00:99::":        "xlb-l2-vip-fd000099000000000000000000000000",
		"fd00:99::1":       "xlb-l2-vip-fd000099000000000000000000000001",
	} {
		got := VIPLease(ip(v))
		if got != want {
			t.Errorf("VIPLease(%s) = %q, want %q", v, got, want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("VIPLease(%s) = %q: no object name: %v", v, got, errs)
		}
	}
	if got := parseVIPs(formatVIPs([]netip.Addr{ip("10.99.0.1"), ip("10.99.0.2")}) + ",junk"); !slices.Equal(got, []netip.Addr{ip("10.99.0.1"), ip("10.99.0.2")}) {
		t.Errorf("parseVIPs(formatVIPs) = %v", got)
	}
}
