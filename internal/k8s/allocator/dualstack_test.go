package allocator

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// TestDualStack: a Service holds an address of each family under one
// key, each from the pools of its family; exhaustion and the lack of a
// pool of the family are told apart, with what to do.
func TestDualStack(t *testing.T) {
	ip := netip.MustParseAddr
	v4 := mustPool(t, "a-v4", api.AddressPoolSpec{Addresses: []string{"10.99.0.0/31"}})
	dual := mustPool(t, "dual", api.AddressPoolSpec{Addresses: []string{"10.99.1.0/31", "2001:db8:99::/127"}})
	if v4.Family() != "IPv4" || dual.Family() != "IPv4 and IPv6" || dual.SizeOf(true) != 2 || dual.SizeOf(false) != 2 {
		t.Errorf("families %q %q, dual sizes %d %d", v4.Family(), dual.Family(), dual.SizeOf(false), dual.SizeOf(true))
	}
	a := New()
	a.SetPools([]*Pool{v4, dual}, nil)

	req4, req6 := keyReq("ns/web"), keyReq("ns/web")
	req6.IPv6 = true
	a4, err4 := a.Allocate(req4)
	a6, err6 := a.Allocate(req6)
	if err4 != nil || err6 != nil || a4 != ip("10.99.0.0") || a6 != ip("2001:db8:99::") {
		t.Fatalf("allocated %v (%v) and %v (%v), want 10.99.0.0 and 2001:db8:99::", a4, err4, a6, err6)
	}
	if got, _ := a.Lookup("ns/web", true); got != a6 {
		t.Errorf("Lookup IPv6 = %v", got)
	}
	if got, _ := a.Lookup("ns/web", false); got != a4 {
		t.Errorf("Lookup IPv4 = %v", got)
	}
	if used, size, _ := a.Usage("dual"); used != 1 || size != 4 {
		t.Errorf("dual usage %d/%d, want 1/4", used, size)
	}
	// Planning again keeps both.
	if p, err := a.Plan(req6); err != nil || p != a6 {
		t.Errorf("Plan IPv6 again: %v, %v", p, err)
	}

	// The IPv6 half of dual runs out.
	other := keyReq("ns/b")
	other.IPv6 = true
	if _, err := a.Allocate(other); err != nil {
		t.Fatal(err)
	}
	third := keyReq("ns/c")
	third.IPv6 = true
	_, err := a.Plan(third)
	if ReasonOf(err) != ReasonPoolExhausted || !strings.Contains(err.Error(), `"dual" (2 IPv6 addresses)`) {
		t.Errorf("IPv6 exhausted: %v", err)
	}
	// Its IPv4 half is still free: an IPv4 request gets it.
	if x, err := a.Plan(keyReq("ns/c")); err != nil || x != ip("10.99.0.1") {
		t.Errorf("IPv4 after IPv6 ran out: %v, %v", x, err)
	}

	// Releasing one family leaves the other.
	if x, ok := a.Release("ns/web", true); !ok || x != a6 {
		t.Errorf("Release IPv6 = %v, %v", x, ok)
	}
	if got, ok := a.Lookup("ns/web", false); !ok || got != a4 {
		t.Errorf("IPv4 after releasing IPv6: %v, %v", got, ok)
	}

	// Without an IPv6 pool, an IPv6 request is told so.
	b := New()
	b.SetPools([]*Pool{v4}, nil)
	_, err = b.Plan(req6)
	if ReasonOf(err) != ReasonNoEligiblePool || !strings.Contains(err.Error(), "no auto-assign address pool has IPv6 addresses") {
		t.Errorf("no IPv6 pool: %v", err)
	}
	// A requested pool without the family, and an address of the other
	// family, are refused.
	named := req6
	named.Pool = "a-v4"
	if _, err := b.Plan(named); ReasonOf(err) != ReasonNotEligible || !strings.Contains(err.Error(), `requested address pool "a-v4" has no IPv6 addresses (it is an IPv4 pool)`) {
		t.Errorf("IPv4 pool for IPv6: %v", err)
	}
	wrong := req6
	wrong.Address = ip("10.99.0.1")
	if _, err := b.Plan(wrong); ReasonOf(err) != ReasonInvalidRequest || !strings.Contains(err.Error(), "requested address 10.99.0.1 is IPv4, and this is the Service's IPv6 address") {
		t.Errorf("IPv4 address for IPv6: %v", err)
	}
	// A reserved (node) IPv6 address is never planned.
	b.SetPools([]*Pool{dual}, nil)
	b.SetReserved(map[netip.Addr]string{ip("2001:db8:99::"): "the InternalIP of Node n1"})
	if x, err := b.Plan(req6); err != nil || x != ip("2001:db8:99::1") {
		t.Errorf("with a reserved IPv6 address: %v, %v; want 2001:db8:99::1", x, err)
	}
}
