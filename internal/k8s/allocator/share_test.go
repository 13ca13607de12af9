package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

var (
	tcp80  = Port{80, "TCP"}
	tcp443 = Port{443, "TCP"}
	udp53  = Port{53, "UDP"}
	tcp53  = Port{53, "TCP"}
)

// svc is a Service "ns/name" with a sharing key and ports.
func svc(key, sharing string, ports ...Port) Request {
	r := keyReq(key)
	r.Sharing, r.Ports = sharing, ports
	return r
}

// held is a Service holding an address, for the table below.
type held struct {
	req  Request
	addr string
}

func TestPlanSharing(t *testing.T) {
	ip := netip.MustParseAddr
	web := api.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
	pools := func(t *testing.T) []*Pool {
		return []*Pool{
			mustPool(t, "auto", api.AddressPoolSpec{Addresses: []string{"10.0.1.0/30"}}),
			mustPool(t, "manual", api.AddressPoolSpec{Addresses: []string{"10.0.2.0/30"}, AutoAssign: ptr(false)}),
			mustPool(t, "web", api.AddressPoolSpec{Addresses: []string{"10.0.3.0/30"}, AutoAssign: ptr(false),
				ServiceAllocation: &api.ServiceAllocation{ServiceSelectors: []api.LabelSelector{web}}}),
		}
	}
	dnsUDP := svc("a/dns-udp", "dns", udp53)
	withAddr := func(r Request, a string) Request { r.Address = ip(a); return r }
	withPool := func(r Request, p string) Request { r.Pool = p; return r }
	tests := []struct {
		name    string
		held    []held
		nodes   []string
		gone    bool // the pools are removed after the holdings
		req     Request
		want    string
		reason  Reason
		message []string
	}{
		{name: "the first of a key gets a free address", req: dnsUDP, want: "10.0.1.0"},
		{name: "TCP and UDP of one port share", held: []held{{dnsUDP, "10.0.1.0"}}, req: svc("a/dns-tcp", "dns", tcp53), want: "10.0.1.0"},
		{name: "web and admin ports share", held: []held{{svc("a/web", "front", tcp80), "10.0.1.2"}}, req: svc("a/admin", "front", tcp443), want: "10.0.1.2"},
		{name: "a third joins", held: []held{{dnsUDP, "10.0.1.1"}, {svc("a/dns-tcp", "dns", tcp53), "10.0.1.1"}}, req: svc("a/web", "dns", tcp80, tcp443), want: "10.0.1.1"},
		{name: "a port in common is refused", held: []held{{dnsUDP, "10.0.1.0"}}, req: svc("a/dns2", "dns", tcp53, udp53),
			reason: ReasonSharingConflict, message: []string{`sharing key "dns" in namespace a hold 10.0.1.0`, "shared with Service a/dns-udp", "has port 53/UDP too", "give it other ports"}},
		{name: "refused, not given an address of its own", held: []held{{svc("a/web", "front", tcp80), "10.0.1.0"}}, req: svc("a/web2", "front", tcp80),
			reason: ReasonSharingConflict},
		{name: "another key does not share", held: []held{{dnsUDP, "10.0.1.0"}}, req: svc("a/other", "other", tcp53), want: "10.0.1.1"},
		{name: "no key does not share", held: []held{{svc("a/plain", "", udp53), "10.0.1.0"}}, req: svc("a/dns-tcp", "dns", tcp53), want: "10.0.1.1"},
		{name: "a key does not reach into another namespace", held: []held{{dnsUDP, "10.0.1.0"}}, req: svc("b/dns-tcp", "dns", tcp53), want: "10.0.1.1"},
		{name: "a held shared address is kept", held: []held{{dnsUDP, "10.0.1.3"}, {svc("a/dns-tcp", "dns", tcp53), "10.0.1.3"}}, req: svc("a/dns-tcp", "dns", tcp53), want: "10.0.1.3"},
		{name: "a holder whose ports now clash cannot keep it", held: []held{{dnsUDP, "10.0.1.3"}, {svc("a/dns-tcp", "dns", tcp53), "10.0.1.3"}},
			req: svc("a/dns-tcp", "dns", tcp53, udp53), reason: ReasonSharingConflict, message: []string{"has port 53/UDP too"}},
		{name: "a holder that drops its key moves to an address of its own", held: []held{{dnsUDP, "10.0.1.3"}, {svc("a/dns-tcp", "dns", tcp53), "10.0.1.3"}},
			req: svc("a/dns-tcp", "", tcp53), want: "10.0.1.0"},
		{name: "a holder whose key changes keeps an address it holds alone", held: []held{{dnsUDP, "10.0.1.3"}}, req: svc("a/dns-udp", "other", udp53), want: "10.0.1.3"},

		{name: "requested address shared by key", held: []held{{dnsUDP, "10.0.2.1"}}, req: withAddr(svc("a/dns-tcp", "dns", tcp53), "10.0.2.1"), want: "10.0.2.1"},
		{name: "requested address of another key", held: []held{{dnsUDP, "10.0.2.1"}}, req: withAddr(svc("a/x", "other", tcp53), "10.0.2.1"),
			reason: ReasonAddressTaken, message: []string{"requested address 10.0.2.1 is taken by Service a/dns-udp", `whose sharing key is "dns", not "other"`}},
		{name: "requested address without a key", held: []held{{dnsUDP, "10.0.2.1"}}, req: withAddr(svc("a/x", "", tcp53), "10.0.2.1"),
			reason: ReasonAddressTaken, message: []string{"taken by Service a/dns-udp", "xlb.io/sharing-key"}},
		{name: "requested address of another namespace", held: []held{{dnsUDP, "10.0.2.1"}}, req: withAddr(svc("b/x", "dns", tcp53), "10.0.2.1"),
			reason: ReasonAddressTaken, message: []string{"in one namespace"}},
		{name: "requested address with a port in common", held: []held{{dnsUDP, "10.0.2.1"}}, req: withAddr(svc("a/x", "dns", udp53), "10.0.2.1"),
			reason: ReasonSharingConflict, message: []string{"requested address 10.0.2.1 is shared with Service a/dns-udp", "53/UDP"}},
		{name: "a requested address wins over the key's", held: []held{{dnsUDP, "10.0.1.0"}}, req: withAddr(svc("a/dns-tcp", "dns", tcp53), "10.0.2.2"), want: "10.0.2.2"},
		{name: "a Service that requested it joins", held: []held{{withAddr(dnsUDP, "10.0.2.1"), "10.0.2.1"}}, req: svc("a/dns-tcp", "dns", tcp53), want: "10.0.2.1"},

		{name: "requested pool holding the key's address", held: []held{{withPool(dnsUDP, "manual"), "10.0.2.0"}}, req: withPool(svc("a/dns-tcp", "dns", tcp53), "manual"), want: "10.0.2.0"},
		{name: "requested pool not holding the key's address", held: []held{{dnsUDP, "10.0.1.0"}}, req: withPool(svc("a/dns-tcp", "dns", tcp53), "manual"),
			reason: ReasonSharingConflict, message: []string{`10.0.1.0 belongs to address pool "auto", not to the requested pool "manual"`}},
		{name: "the key's pool does not serve the Service", held: []held{{func() Request {
			r := withPool(svc("a/web", "front", tcp80), "web")
			r.Labels = map[string]string{"tier": "web"}
			return r
		}(), "10.0.3.0"}}, req: svc("a/admin", "front", tcp443),
			reason: ReasonSharingConflict, message: []string{`address pool "web", which serves Services matching its serviceSelectors only`}},
		{name: "the key's address became a node's", held: []held{{dnsUDP, "10.0.1.0"}}, nodes: []string{"10.0.1.0"}, req: svc("a/dns-tcp", "dns", tcp53),
			reason: ReasonSharingConflict, message: []string{"10.0.1.0 is the InternalIP of Node n"}},
		{name: "the key's address left every pool", held: []held{{dnsUDP, "10.0.1.0"}}, gone: true, req: svc("a/dns-tcp", "dns", tcp53),
			reason: ReasonSharingConflict, message: []string{"10.0.1.0 is in no address pool any more"}},
		{name: "a key over two addresses: the lowest it may join", held: []held{
			{svc("a/one", "k", tcp80), "10.0.1.0"}, {svc("a/two", "k", tcp443), "10.0.1.2"}}, req: svc("a/three", "k", tcp80), want: "10.0.1.2"},
		{name: "a key over two addresses, neither joinable", held: []held{
			{svc("a/one", "k", tcp80), "10.0.1.0"}, {svc("a/two", "k", tcp80), "10.0.1.2"}}, req: svc("a/three", "k", tcp80),
			reason: ReasonSharingConflict, message: []string{"hold 10.0.1.0, 10.0.1.2", "10.0.1.0 is shared with Service a/one", "10.0.1.2 is shared with Service a/two"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAlloc(t, pools(t), nil)
			for _, h := range tt.held {
				if err := a.Assign(h.req, ip(h.addr)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.gone {
				a.SetPools(nil, nil)
			}
			nodes := map[netip.Addr]string{}
			for _, n := range tt.nodes {
				nodes[ip(n)] = "the InternalIP of Node n"
			}
			a.SetReserved(nodes)
			before := a.Holdings()
			got, err := a.Plan(tt.req)
			if after := a.Holdings(); fmt.Sprint(before) != fmt.Sprint(after) {
				t.Errorf("Plan changed the holdings: %v → %v", before, after)
			}
			if tt.want != "" {
				if err != nil {
					t.Fatalf("Plan: %v, want %s", err, tt.want)
				}
				if got != ip(tt.want) {
					t.Fatalf("Plan = %s, want %s", got, tt.want)
				}
				// What Plan plans, Assign records.
				if err := a.Assign(tt.req, got); err != nil {
					t.Fatalf("Assign of the planned %s: %v", got, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Plan = %s, want a %s error", got, tt.reason)
			}
			if r := ReasonOf(err); r != tt.reason {
				t.Errorf("reason %q, want %q (%v)", r, tt.reason, err)
			}
			for _, m := range tt.message {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q lacks %q", err, m)
				}
			}
		})
	}
}

// An address shared by two Services stays held, and counted once, until
// the last of them goes.
func TestShareRelease(t *testing.T) {
	ip := netip.MustParseAddr
	a := newAlloc(t, []*Pool{mustPool(t, "p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/31"}})}, nil)
	udp, tcp := svc("a/dns-udp", "dns", udp53), svc("a/dns-tcp", "dns", tcp53)
	for _, r := range []Request{udp, tcp} {
		if got, err := a.Allocate(r); err != nil || got != ip("10.0.0.0") {
			t.Fatalf("Allocate(%s) = %v, %v; want 10.0.0.0", r.Key, got, err)
		}
	}
	if h := a.Holders(ip("10.0.0.0")); !slices.Equal(h, []string{"a/dns-tcp", "a/dns-udp"}) {
		t.Fatalf("holders %v", h)
	}
	usage := func() string { used, size, _ := a.Usage("p"); return fmt.Sprintf("%d/%d", used, size) }
	if u := usage(); u != "1/2" {
		t.Errorf("usage %s with one shared address, want 1/2", u)
	}
	// Another Service gets the other address, then none is left.
	if got, err := a.Allocate(keyReq("a/web")); err != nil || got != ip("10.0.0.1") {
		t.Fatalf("Allocate(a/web) = %v, %v", got, err)
	}
	if _, err := a.Allocate(keyReq("a/more")); ReasonOf(err) != ReasonPoolExhausted {
		t.Fatalf("Allocate(a/more): %v, want exhausted", err)
	}
	// The first sharer goes: the address stays the other's.
	if addr, ok := a.Release("a/dns-udp", false); !ok || addr != ip("10.0.0.0") {
		t.Fatalf("Release(a/dns-udp) = %v, %v", addr, ok)
	}
	if h := a.Holders(ip("10.0.0.0")); !slices.Equal(h, []string{"a/dns-tcp"}) {
		t.Errorf("holders after one left %v, want a/dns-tcp", h)
	}
	if u := usage(); u != "2/2" {
		t.Errorf("usage %s after one sharer left, want 2/2", u)
	}
	if _, err := a.Allocate(keyReq("a/more")); ReasonOf(err) != ReasonPoolExhausted {
		t.Fatalf("Allocate(a/more) with the address still shared: %v, want exhausted", err)
	}
	// It comes back to the key, then the last one goes: free.
	if got, err := a.Allocate(udp); err != nil || got != ip("10.0.0.0") {
		t.Fatalf("Allocate(a/dns-udp) again = %v, %v", got, err)
	}
	a.Release("a/dns-udp", false)
	a.Release("a/dns-tcp", false)
	if h := a.Holders(ip("10.0.0.0")); len(h) != 0 {
		t.Errorf("holders after both left %v", h)
	}
	if got, err := a.Allocate(keyReq("a/more")); err != nil || got != ip("10.0.0.0") {
		t.Errorf("Allocate(a/more) after the last sharer left = %v, %v; want 10.0.0.0", got, err)
	}
}

// Assign records a holder's new ports and key on the address it holds,
// and refuses what it may not share, keeping the old record.
func TestAssignSharing(t *testing.T) {
	ip := netip.MustParseAddr
	a := newAlloc(t, []*Pool{mustPool(t, "p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/30"}})}, nil)
	x := ip("10.0.0.1")
	for _, r := range []Request{svc("a/web", "front", tcp80), svc("a/admin", "front", tcp443)} {
		if err := a.Assign(r, x); err != nil {
			t.Fatal(err)
		}
	}
	// admin takes port 8443 as well: recorded.
	if err := a.Assign(svc("a/admin", "front", tcp443, Port{8443, "TCP"}), x); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.HoldingOf("a/admin", false); fmt.Sprint(h.Ports) != "[443/TCP 8443/TCP]" {
		t.Errorf("admin's ports %v after the change", h.Ports)
	}
	// admin takes port 80: refused, the record stays.
	err := a.Assign(svc("a/admin", "front", tcp80), x)
	if ReasonOf(err) != ReasonSharingConflict || !strings.Contains(err.Error(), "address 10.0.0.1 is shared with Service a/web") {
		t.Errorf("Assign with web's port: %v, want a sharing conflict", err)
	}
	if h, _ := a.HoldingOf("a/admin", false); fmt.Sprint(h.Ports) != "[443/TCP 8443/TCP]" || h.Addr != x {
		t.Errorf("admin's holding %+v after a refused Assign", h)
	}
	// Moving one sharer elsewhere leaves the other.
	if err := a.Assign(svc("a/admin", "front", tcp443), ip("10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	if h := a.Holders(x); !slices.Equal(h, []string{"a/web"}) {
		t.Errorf("holders of %s after admin moved: %v", x, h)
	}
	if used, _, _ := a.Usage("p"); used != 2 {
		t.Errorf("used %d, want 2", used)
	}
}
