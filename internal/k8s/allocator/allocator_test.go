package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

func mustPool(t testing.TB, name string, spec api.AddressPoolSpec) *Pool {
	t.Helper()
	p, err := ParsePool(name, spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// keyReq is the request of Service key ("namespace/name") with nothing
// else asked for.
func keyReq(key string) Request {
	ns, _, _ := strings.Cut(key, "/")
	return Request{Key: key, Namespace: ns}
}

// newAlloc returns an allocator with pools (oldest first) and addresses
// held ("ns/name" → address).
func newAlloc(t testing.TB, pools []*Pool, held map[string]string) *Allocator {
	t.Helper()
	a := New()
	if rej := a.SetPools(pools, nil); len(rej) > 0 {
		t.Fatalf("SetPools rejected %v", rej)
	}
	for key, addr := range held {
		if err := a.Assign(keyReq(key), netip.MustParseAddr(addr)); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func TestPlan(t *testing.T) {
	ip := netip.MustParseAddr
	web := api.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
	// Tried in this order: "first" (priority 1), "second" (priority 2),
	// "manual" is never auto-assigned, "team" serves namespace "team"
	// only, "web" Services labelled tier=web only, "buggy" leaves out .0
	// and .255, "zlast" has priority 0.
	pools := func(t *testing.T) []*Pool {
		return []*Pool{
			mustPool(t, "zlast", api.AddressPoolSpec{Addresses: []string{"10.0.9.0/30"}}),
			mustPool(t, "second", api.AddressPoolSpec{Addresses: []string{"10.0.2.0/30"}, ServiceAllocation: &api.ServiceAllocation{Priority: 2}}),
			mustPool(t, "first", api.AddressPoolSpec{Addresses: []string{"10.0.1.1-10.0.1.2"}, ServiceAllocation: &api.ServiceAllocation{Priority: 1}}),
			mustPool(t, "manual", api.AddressPoolSpec{Addresses: []string{"10.0.3.0/30"}, AutoAssign: ptr(false)}),
			mustPool(t, "team", api.AddressPoolSpec{Addresses: []string{"10.0.4.0/30"}, AutoAssign: ptr(false),
				ServiceAllocation: &api.ServiceAllocation{Namespaces: []string{"team"}}}),
			mustPool(t, "web", api.AddressPoolSpec{Addresses: []string{"10.0.5.0/30"}, AutoAssign: ptr(false),
				ServiceAllocation: &api.ServiceAllocation{ServiceSelectors: []api.LabelSelector{web}}}),
			mustPool(t, "buggy", api.AddressPoolSpec{Addresses: []string{"10.0.6.254-10.0.7.1"}, AutoAssign: ptr(false), AvoidBuggyIPs: true}),
		}
	}
	req := func(key string) Request {
		ns, _, _ := strings.Cut(key, "/")
		return Request{Key: key, Namespace: ns}
	}
	withAddr := func(r Request, a string) Request { r.Address = ip(a); return r }
	withPool := func(r Request, p string) Request { r.Pool = p; return r }
	tests := []struct {
		name    string
		pools   []*Pool // nil: pools(t)
		held    map[string]string
		nodes   []string // node addresses (SetReserved)
		req     Request
		want    string // address; "" with reason
		reason  Reason
		message []string
	}{
		{name: "first pool by priority, lowest address", req: req("a/s"), want: "10.0.1.1"},
		{name: "next free address", held: map[string]string{"a/x": "10.0.1.1"}, req: req("a/s"), want: "10.0.1.2"},
		{name: "a hole is reused", held: map[string]string{"a/x": "10.0.2.0", "a/y": "10.0.2.2", "a/f1": "10.0.1.1", "a/f2": "10.0.1.2"},
			req: req("a/s"), want: "10.0.2.1"},
		{name: "next pool when full", held: map[string]string{"a/x": "10.0.1.1", "a/y": "10.0.1.2"}, req: req("a/s"), want: "10.0.2.0"},
		{name: "priority 0 last", held: fill("10.0.1.1", 2, "10.0.2.0", 4), req: req("a/s"), want: "10.0.9.0"},
		{name: "all auto-assign pools exhausted", held: fill("10.0.1.1", 2, "10.0.2.0", 4, "10.0.9.0", 4), req: req("a/s"),
			reason: ReasonPoolExhausted, message: []string{`"first" (2 addresses)`, `"second" (4 addresses)`, `"zlast" (4 addresses)`}},
		{name: "held address is kept", held: map[string]string{"a/s": "10.0.9.3"}, req: req("a/s"), want: "10.0.9.3"},
		{name: "held address outside every pool is kept", held: map[string]string{"a/s": "192.0.2.1"}, req: req("a/s"), want: "192.0.2.1"},

		{name: "requested address", req: withAddr(req("a/s"), "10.0.2.3"), want: "10.0.2.3"},
		{name: "requested address of a manual pool", req: withAddr(req("a/s"), "10.0.3.1"), want: "10.0.3.1"},
		{name: "requested address already held by the Service", held: map[string]string{"a/s": "10.0.3.1"}, req: withAddr(req("a/s"), "10.0.3.1"), want: "10.0.3.1"},
		{name: "requested address moves the Service", held: map[string]string{"a/s": "10.0.1.1"}, req: withAddr(req("a/s"), "10.0.3.1"), want: "10.0.3.1"},
		{name: "requested address taken", held: map[string]string{"b/other": "10.0.3.1"}, req: withAddr(req("a/s"), "10.0.3.1"),
			reason: ReasonAddressTaken, message: []string{"10.0.3.1 is taken by Service b/other", "share an address only if all of them have the annotation xlb.io/sharing-key"}},
		{name: "requested address outside every pool", req: withAddr(req("a/s"), "192.0.2.1"),
			reason: ReasonOutsidePools, message: []string{"192.0.2.1 is outside every address pool"}},
		{name: "requested IPv6 address", req: withAddr(req("a/s"), "fd00::1"), reason: ReasonInvalidRequest, message: []string{"fd00::1", "IPv6"}},
		{name: "requested address of a pool not serving the namespace", req: withAddr(req("a/s"), "10.0.4.1"),
			reason: ReasonNotEligible, message: []string{`pool "team"`, "serves namespaces team only"}},
		{name: "requested address of a pool serving the namespace", req: withAddr(req("team/s"), "10.0.4.1"), want: "10.0.4.1"},
		{name: "requested buggy address", req: withAddr(req("a/s"), "10.0.7.0"), reason: ReasonNotEligible, message: []string{"avoidBuggyIPs"}},
		{name: "requested address and pool agree", req: withPool(withAddr(req("a/s"), "10.0.3.2"), "manual"), want: "10.0.3.2"},
		{name: "requested address and pool disagree", req: withPool(withAddr(req("a/s"), "10.0.3.2"), "first"),
			reason: ReasonInvalidRequest, message: []string{`belongs to address pool "manual", not to the requested pool "first"`}},

		{name: "requested pool without auto-assign", req: withPool(req("a/s"), "manual"), want: "10.0.3.0"},
		{name: "requested pool skips buggy addresses", req: withPool(req("a/s"), "buggy"), want: "10.0.6.254"},
		{name: "requested pool skips buggy addresses when full", held: map[string]string{"a/x": "10.0.6.254"}, req: withPool(req("a/s"), "buggy"), want: "10.0.7.1"},
		{name: "requested pool exhausted", held: fill("10.0.3.0", 4), req: withPool(req("a/s"), "manual"),
			reason: ReasonPoolExhausted, message: []string{`address pool "manual" is exhausted: all its 4 addresses are in use`}},
		{name: "requested pool does not exist", req: withPool(req("a/s"), "nope"), reason: ReasonUnknownPool, message: []string{`"nope" does not exist`}},
		{name: "requested pool not for this namespace", req: withPool(req("a/s"), "team"), reason: ReasonNotEligible, message: []string{"serves namespaces team only"}},
		{name: "requested pool by labels", req: func() Request {
			r := withPool(req("a/s"), "web")
			r.Labels = map[string]string{"tier": "web"}
			return r
		}(), want: "10.0.5.0"},
		{name: "held address of another pool moves to the requested pool", held: map[string]string{"a/s": "10.0.1.1"}, req: withPool(req("a/s"), "manual"), want: "10.0.3.0"},

		{name: "node addresses are skipped", nodes: []string{"10.0.1.1"}, req: req("a/s"), want: "10.0.1.2"},
		{name: "a pool of node addresses only is passed over", nodes: []string{"10.0.1.1", "10.0.1.2"}, req: req("a/s"), want: "10.0.2.0"},
		{name: "a held node address is not kept", nodes: []string{"10.0.9.3"}, held: map[string]string{"a/s": "10.0.9.3"}, req: req("a/s"), want: "10.0.1.1"},
		{name: "a held node address outside every pool is not kept", nodes: []string{"192.0.2.1"}, held: map[string]string{"a/s": "192.0.2.1"}, req: req("a/s"), want: "10.0.1.1"},
		{name: "requested node address", nodes: []string{"10.0.3.1"}, req: withAddr(req("a/s"), "10.0.3.1"),
			reason: ReasonNodeAddress, message: []string{"requested address 10.0.3.1 is the InternalIP of Node n", "takes that node off the network"}},
		{name: "requested node address already held", nodes: []string{"10.0.3.1"}, held: map[string]string{"a/s": "10.0.3.1"}, req: withAddr(req("a/s"), "10.0.3.1"),
			reason: ReasonNodeAddress, message: []string{"10.0.3.1 is the InternalIP of Node n"}},
		{name: "requested node address outside every pool", nodes: []string{"192.0.2.1"}, req: withAddr(req("a/s"), "192.0.2.1"),
			reason: ReasonNodeAddress, message: []string{"192.0.2.1 is the InternalIP of Node n"}},
		{name: "requested pool skips node addresses", nodes: []string{"10.0.3.0", "10.0.3.1"}, req: withPool(req("a/s"), "manual"), want: "10.0.3.2"},
		{name: "requested pool exhausted with node addresses", nodes: []string{"10.0.3.0"}, held: fill("10.0.3.1", 3), req: withPool(req("a/s"), "manual"),
			reason: ReasonPoolExhausted, message: []string{`all its 3 addresses are in use, not counting 1 that are nodes' own addresses`}},

		{name: "long lists are cut", pools: func() []*Pool {
			var ps []*Pool
			for i := range 7 {
				ps = append(ps, mustPool(t, fmt.Sprintf("ns%d", i), api.AddressPoolSpec{Addresses: []string{fmt.Sprintf("10.1.%d.0/30", i)},
					ServiceAllocation: &api.ServiceAllocation{Namespaces: []string{"x"}}}))
			}
			return ps
		}(), req: req("a/s"), reason: ReasonNoEligiblePool, message: []string{`"ns4" serves namespaces x only; and 2 more`}},
		{name: "no pools", pools: []*Pool{}, req: req("a/s"), reason: ReasonNoEligiblePool, message: []string{"no auto-assign address pool exists"}},
		{name: "no eligible pool", pools: []*Pool{mustPool(t, "team", api.AddressPoolSpec{Addresses: []string{"10.0.4.0/30"},
			ServiceAllocation: &api.ServiceAllocation{Namespaces: []string{"team"}}})},
			req: req("a/s"), reason: ReasonNoEligiblePool, message: []string{`"team" serves namespaces team only`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := tt.pools
			if ps == nil {
				ps = pools(t)
			}
			a := newAlloc(t, ps, tt.held)
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

// fill returns holdings of n consecutive addresses from each start, for
// made-up Services.
func fill(startCount ...any) map[string]string {
	held := map[string]string{}
	for i := 0; i < len(startCount); i += 2 {
		a := netip.MustParseAddr(startCount[i].(string))
		for range startCount[i+1].(int) {
			held[fmt.Sprintf("filler/%s", a)] = a.String()
			a = a.Next()
		}
	}
	return held
}

func TestSetPoolsOverlap(t *testing.T) {
	a := New()
	old := mustPool(t, "old", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/28"}})
	other := mustPool(t, "other", api.AddressPoolSpec{Addresses: []string{"10.1.0.0/28"}})
	newer := mustPool(t, "aaa-new", api.AddressPoolSpec{Addresses: []string{"10.2.0.0/30", "10.0.0.8-10.0.0.20"}})
	broken := fmt.Errorf("address pool %q: broken", "bad")
	rej := a.SetPools([]*Pool{old, other, newer}, map[string]error{"bad": broken})
	if len(rej) != 2 || rej["bad"] != broken {
		t.Fatalf("rejected %v, want aaa-new and bad", rej)
	}
	msg := fmt.Sprint(rej["aaa-new"])
	for _, w := range []string{`"aaa-new"`, `"old"`, "10.0.0.8-10.0.0.20 overlaps 10.0.0.0/28"} {
		if !strings.Contains(msg, w) {
			t.Errorf("rejection %q lacks %q", msg, w)
		}
	}
	if got := len(a.Pools()); got != 2 {
		t.Errorf("%d pools in use, want 2", got)
	}
	if got := a.PoolOf(netip.MustParseAddr("10.0.0.9")); got != "old" {
		t.Errorf("PoolOf(10.0.0.9) = %q, want old", got)
	}
	if got := a.PoolOf(netip.MustParseAddr("10.2.0.1")); got != "" {
		t.Errorf("PoolOf(10.2.0.1) = %q, want none: its pool is rejected", got)
	}
	_, err := a.Plan(Request{Key: "a/s", Pool: "bad"})
	if ReasonOf(err) != ReasonUnknownPool || !strings.Contains(fmt.Sprint(err), "broken") {
		t.Errorf("requesting the invalid pool: %v, want UnknownPool with its reason", err)
	}
	_, err = a.Plan(Request{Key: "a/s", Pool: "aaa-new"})
	if !strings.Contains(fmt.Sprint(err), "overlaps") {
		t.Errorf("requesting the overlapping pool: %v, want the overlap", err)
	}
}

// Changing pools keeps every held address and recounts usage.
func TestSetPoolsKeepsHoldings(t *testing.T) {
	ip := netip.MustParseAddr
	p1 := mustPool(t, "p1", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/30"}})
	a := newAlloc(t, []*Pool{p1}, map[string]string{"a/x": "10.0.0.0", "a/y": "10.0.0.1"})
	if used, size, _ := a.Usage("p1"); used != 2 || size != 4 {
		t.Fatalf("usage %d/%d, want 2/4", used, size)
	}
	a.SetPools(nil, nil)
	if _, _, ok := a.Usage("p1"); ok {
		t.Fatal("p1 still in use")
	}
	if got, _ := a.Plan(Request{Key: "a/x"}); got != ip("10.0.0.0") {
		t.Errorf("a/x plans %v after its pool went, want to keep 10.0.0.0", got)
	}
	// The address stays reserved: a pool coming back must not hand it
	// to someone else.
	p1b := mustPool(t, "p1b", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/31"}})
	a.SetPools([]*Pool{p1b}, nil)
	if used, _, _ := a.Usage("p1b"); used != 2 {
		t.Errorf("p1b used %d, want 2", used)
	}
	if _, err := a.Allocate(Request{Key: "a/z"}); ReasonOf(err) != ReasonPoolExhausted {
		t.Errorf("allocating from a pool whose addresses are held: %v, want exhausted", err)
	}
	if _, ok := a.Release("a/x", false); !ok {
		t.Fatal("Release(a/x) found nothing")
	}
	if got, err := a.Allocate(Request{Key: "a/z"}); err != nil || got != ip("10.0.0.0") {
		t.Errorf("Allocate after release = %v, %v; want 10.0.0.0", got, err)
	}
}

func TestAssign(t *testing.T) {
	ip := netip.MustParseAddr
	p := mustPool(t, "p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/30"}})
	a := newAlloc(t, []*Pool{p}, nil)
	if err := a.Assign(keyReq("a/x"), ip("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := a.Assign(keyReq("a/x"), ip("10.0.0.1")); err != nil {
		t.Errorf("assigning the same address again: %v", err)
	}
	err := a.Assign(keyReq("a/y"), ip("10.0.0.1"))
	if ReasonOf(err) != ReasonAddressTaken || !strings.Contains(err.Error(), "taken by Service a/x") {
		t.Errorf("assigning a held address: %v, want taken by a/x", err)
	}
	if err := a.Assign(keyReq("a/x"), ip("192.0.2.9")); err != nil {
		t.Fatalf("moving to an address outside the pools: %v", err)
	}
	if h := a.Holders(ip("10.0.0.1")); len(h) > 0 {
		t.Errorf("10.0.0.1 still held by %s after a/x moved", h)
	}
	if used, _, _ := a.Usage("p"); used != 0 {
		t.Errorf("p used %d, want 0", used)
	}
	if err := a.Assign(keyReq("a/x"), ip("::ffff:10.0.0.9")); ReasonOf(err) != ReasonInvalidRequest {
		t.Errorf("assigning an IPv4-mapped address: %v", err)
	}
	if got, _ := a.Lookup("a/x", false); got != ip("192.0.2.9") {
		t.Errorf("Lookup = %v after a failed Assign, want 192.0.2.9 kept", got)
	}
}

// A restart rebuilds the allocator from the Services' addresses: the new
// allocator holds the same addresses and hands out the same next address.
func TestRebuild(t *testing.T) {
	pools := func() []*Pool {
		return []*Pool{
			mustPool(t, "p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/29"}}),
			mustPool(t, "q", api.AddressPoolSpec{Addresses: []string{"10.0.1.0/29"}, AutoAssign: ptr(false)}),
		}
	}
	a := newAlloc(t, pools(), nil)
	for i := range 6 {
		if _, err := a.Allocate(Request{Key: fmt.Sprintf("ns/s%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Allocate(Request{Key: "ns/q", Pool: "q"}); err != nil {
		t.Fatal(err)
	}
	a.Release("ns/s2", false)
	a.Release("ns/s4", false)

	b := New()
	// Assignments first, pools afterwards: the order in which a
	// restarting controller learns them must not matter.
	for _, h := range a.Holdings() {
		if err := b.Assign(keyReq(h.Key), h.Addr); err != nil {
			t.Fatal(err)
		}
	}
	b.SetPools(pools(), nil)
	if fmt.Sprint(a.Holdings()) != fmt.Sprint(b.Holdings()) {
		t.Fatalf("rebuilt holdings %v, want %v", b.Holdings(), a.Holdings())
	}
	for _, name := range []string{"p", "q"} {
		ua, _, _ := a.Usage(name)
		ub, _, _ := b.Usage(name)
		if ua != ub {
			t.Errorf("pool %s: usage %d after rebuild, want %d", name, ub, ua)
		}
	}
	for i := range 3 {
		req := Request{Key: fmt.Sprintf("ns/new%d", i)}
		x, errA := a.Allocate(req)
		y, errB := b.Allocate(req)
		if x != y || fmt.Sprint(errA) != fmt.Sprint(errB) {
			t.Errorf("next allocation: original %v %v, rebuilt %v %v", x, errA, y, errB)
		}
	}
}

// Node addresses leave a pool's size and usage, are listed per pool, and
// come back when the nodes go; holdings stay as they are.
func TestSetReserved(t *testing.T) {
	ip := netip.MustParseAddr
	a := newAlloc(t, []*Pool{
		mustPool(t, "p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/29"}}),
		mustPool(t, "q", api.AddressPoolSpec{Addresses: []string{"10.0.1.0/30"}, AvoidBuggyIPs: true}),
	}, map[string]string{"a/held": "10.0.0.1", "a/other": "10.0.0.2"})
	usage := func(pool string) string {
		used, size, _ := a.Usage(pool)
		return fmt.Sprintf("%d/%d", used, size)
	}
	if u := usage("p"); u != "2/8" {
		t.Fatalf("usage of p %s, want 2/8", u)
	}
	// .1 is held and a node's; .5 a node's; 10.0.1.0 is no address q
	// hands out (avoidBuggyIPs), 192.0.2.1 in no pool.
	a.SetReserved(map[netip.Addr]string{ip("10.0.0.1"): "n1", ip("10.0.0.5"): "n2", ip("10.0.1.0"): "n3", ip("192.0.2.1"): "n4", ip("fd00::1"): "n5"})
	if u := usage("p"); u != "1/6" {
		t.Errorf("usage of p with two node addresses %s, want 1/6", u)
	}
	if u := usage("q"); u != "0/3" {
		t.Errorf("usage of q %s, want 0/3: its .0 is not handed out anyway", u)
	}
	if got := fmt.Sprint(a.ReservedIn("p")); got != "[10.0.0.1 10.0.0.5]" {
		t.Errorf("ReservedIn(p) = %s", got)
	}
	if got := a.ReservedIn("q"); len(got) != 0 {
		t.Errorf("ReservedIn(q) = %v, want none", got)
	}
	if why, ok := a.Reserved(ip("10.0.0.5")); !ok || why != "n2" {
		t.Errorf("Reserved(10.0.0.5) = %q, %v", why, ok)
	}
	if h := a.Holders(ip("10.0.0.1")); !slices.Equal(h, []string{"a/held"}) {
		t.Errorf("the node address's holders %q: SetReserved must not drop it", h)
	}
	// Release and Assign keep the counts right around reserved addresses.
	a.Release("a/held", false)
	if u := usage("p"); u != "1/6" {
		t.Errorf("usage after releasing the node address %s, want 1/6", u)
	}
	if err := a.Assign(keyReq("a/held"), ip("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if u := usage("p"); u != "1/6" {
		t.Errorf("usage after assigning the node address again %s, want 1/6", u)
	}
	a.SetReserved(nil)
	if u := usage("p"); u != "2/8" {
		t.Errorf("usage once the nodes are gone %s, want 2/8", u)
	}
}
