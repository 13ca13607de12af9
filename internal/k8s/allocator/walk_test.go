package allocator

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// candidatePools are the pools a walk chooses from: small, some
// overlapping (so that SetPools rejects some), some restricted.
var candidatePools = []struct {
	name string
	spec api.AddressPoolSpec
}{
	{"a", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/29"}}},
	{"b", api.AddressPoolSpec{Addresses: []string{"10.0.0.4-10.0.0.12"}, ServiceAllocation: &api.ServiceAllocation{Priority: 1}}},
	{"c", api.AddressPoolSpec{Addresses: []string{"10.0.0.16/30", "10.0.0.24/31"}, AutoAssign: ptr(false)}},
	{"d", api.AddressPoolSpec{Addresses: []string{"10.0.0.254-10.0.1.1"}, AvoidBuggyIPs: true}},
	{"e", api.AddressPoolSpec{Addresses: []string{"10.0.0.32/30"}, ServiceAllocation: &api.ServiceAllocation{Namespaces: []string{"ns1"}, Priority: 2}}},
	{"f", api.AddressPoolSpec{Addresses: []string{"10.0.0.20/30"}, ServiceAllocation: &api.ServiceAllocation{Priority: 1}}},
	// IPv6 and dual-stack ones: a Service's address of each family
	// comes from the pools of that family.
	{"g", api.AddressPoolSpec{Addresses: []string{"fd00::/126", "10.0.0.40/31"}}},
	{"h", api.AddressPoolSpec{Addresses: []string{"fd00::2-fd00::6"}, ServiceAllocation: &api.ServiceAllocation{Priority: 1}}},
	{"i", api.AddressPoolSpec{Addresses: []string{"fd00::10/127"}, AutoAssign: ptr(false)}},
	{"j", api.AddressPoolSpec{Addresses: []string{"fd00::ff-fd00::100"}, AvoidBuggyIPs: true, ServiceAllocation: &api.ServiceAllocation{Namespaces: []string{"ns2"}}}},
}

// walkPorts are the ports a walk's Services choose from: one number in
// two protocols, so that ports clash by number and protocol only.
var walkPorts = []Port{{80, "TCP"}, {443, "TCP"}, {53, "UDP"}, {53, "TCP"}}

// walk applies random operations to an allocator and checks after each
// that no address is held twice but by Services that may share it, that
// usage counts are right, and that every allocation obeys the rules.
// next supplies the randomness.
func walk(t *testing.T, next func(n int) int, steps int) {
	a := New()
	keys := []string{"ns1/a", "ns1/b", "ns1/c", "ns2/a", "ns2/b", "ns2/c", "ns3/a", "ns3/b", "ns3/c", "ns3/d"}
	addr := func() netip.Addr {
		if next(3) == 0 {
			b := netip.MustParseAddr("fd00::").As16()
			n := next(270)
			b[14], b[15] = byte(n>>8), byte(n)
			return netip.AddrFrom16(b)
		}
		return fromU32(toU32(netip.MustParseAddr("10.0.0.0")) + uint32(next(270)))
	}
	// A Service: no sharing key in a third of the requests, and one or
	// two ports.
	service := func(key string) Request {
		req := Request{Key: key, Namespace: key[:3], IPv6: next(3) == 0}
		if k := next(3); k > 0 {
			req.Sharing = fmt.Sprintf("k%d", k)
		}
		req.Ports = []Port{walkPorts[next(len(walkPorts))]}
		if next(2) == 0 {
			if p := walkPorts[next(len(walkPorts))]; p != req.Ports[0] {
				req.Ports = append(req.Ports, p)
			}
		}
		return req
	}
	for step := range steps {
		before := a.Holdings()
		var op string
		switch next(7) {
		case 0: // new pools, in a random order and subset
			var ps []*Pool
			for _, i := range rand.New(rand.NewPCG(uint64(next(1<<30)), 0)).Perm(len(candidatePools)) {
				if next(3) == 0 {
					continue
				}
				c := candidatePools[i]
				p, err := ParsePool(c.name, c.spec)
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			a.SetPools(ps, nil)
			op = fmt.Sprintf("SetPools(%d pools)", len(ps))
			if fmt.Sprint(before) != fmt.Sprint(a.Holdings()) {
				t.Fatalf("step %d: %s changed the holdings", step, op)
			}
		case 6: // new node addresses
			nodes := map[netip.Addr]string{}
			for range next(4) {
				nodes[addr()] = "a node's"
			}
			a.SetReserved(nodes)
			op = fmt.Sprintf("SetReserved(%v)", nodes)
			if fmt.Sprint(before) != fmt.Sprint(a.Holdings()) {
				t.Fatalf("step %d: %s changed the holdings", step, op)
			}
		case 1:
			key, v6 := keys[next(len(keys))], next(2) == 0
			a.Release(key, v6)
			op = fmt.Sprintf("Release %s (IPv6 %v)", key, v6)
			if _, ok := a.Lookup(key, v6); ok {
				t.Fatalf("step %d: %s still holds an address", step, op)
			}
		case 2:
			key, x := keys[next(len(keys))], addr()
			req := service(key)
			err := a.Assign(req, x)
			op = fmt.Sprintf("Assign(%+v, %s)", req, x)
			if mayShare(before, req, x) {
				if err != nil {
					t.Fatalf("step %d: %s: %v", step, op, err)
				}
			} else if err == nil {
				t.Fatalf("step %d: %s succeeded though %v hold it", step, op, holdersIn(before, x))
			}
			if err != nil && fmt.Sprint(before) != fmt.Sprint(a.Holdings()) {
				t.Fatalf("step %d: failed %s changed the holdings", step, op)
			}
		default:
			key := keys[next(len(keys))]
			req := service(key)
			switch next(4) {
			case 0:
				req.Address = addr()
			case 1:
				req.Pool = candidatePools[next(len(candidatePools))].name
			}
			got, err := a.Allocate(req)
			op = fmt.Sprintf("Allocate(%+v)", req)
			if err != nil {
				if fmt.Sprint(before) != fmt.Sprint(a.Holdings()) {
					t.Fatalf("step %d: failed %s changed the holdings", step, op)
				}
				if ReasonOf(err) == ReasonPoolExhausted && req.Address.IsValid() {
					t.Fatalf("step %d: %s: exhausted for a requested address", step, op)
				}
				checkNoFree(t, a, req, err, step)
				break
			}
			checkAllocation(t, a, before, req, got, step)
		}
		checkInvariants(t, a, step, op)
	}
}

// holderIn reports whether a Service other than key held x.
func holderIn(hs []Holding, x netip.Addr, key string) bool {
	return slices.ContainsFunc(hs, func(h Holding) bool { return h.Addr == x && h.Key != key })
}

func holdersIn(hs []Holding, x netip.Addr) []string {
	var out []string
	for _, h := range hs {
		if h.Addr == x {
			out = append(out, h.Key)
		}
	}
	return out
}

// mayShare is the sharing rule, written again from the holdings: every
// other holder of x is of req's namespace, has req's sharing key (not
// none) and none of its ports.
func mayShare(hs []Holding, req Request, x netip.Addr) bool {
	for _, h := range hs {
		if h.Addr != x || h.Key == req.Key {
			continue
		}
		if h.Sharing == "" || h.Sharing != req.Sharing || h.Key[:3] != req.Namespace {
			return false
		}
		for _, p := range h.Ports {
			if slices.Contains(req.Ports, p) {
				return false
			}
		}
	}
	return true
}

// groupOf lists the addresses that the other Services of req's
// namespace with its sharing key held.
func groupOf(hs []Holding, req Request) []netip.Addr {
	var out []netip.Addr
	for _, h := range hs {
		if req.Sharing != "" && h.Key != req.Key && h.Key[:3] == req.Namespace && h.Sharing == req.Sharing && h.Addr.Is6() == req.IPv6 && !slices.Contains(out, h.Addr) {
			out = append(out, h.Addr)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// canJoin: req may join the group's address g (the rule of
// planShared, written again).
func canJoin(a *Allocator, before []Holding, req Request, g netip.Addr) bool {
	if _, reserved := a.Reserved(g); reserved {
		return false
	}
	pool := a.PoolOf(g)
	if pool == "" || req.Pool != "" && pool != req.Pool {
		return false
	}
	for _, q := range a.pools {
		if q.Name == pool && !eligible(q, req) {
			return false
		}
	}
	return mayShare(before, req, g)
}

// checkAllocation checks a successful Allocate against the rules.
func checkAllocation(t *testing.T, a *Allocator, before []Holding, req Request, got netip.Addr, step int) {
	t.Helper()
	if h := a.Holders(got); !slices.Contains(h, req.Key) {
		t.Fatalf("step %d: Allocate(%+v) = %s, held by %q", step, req, got, h)
	}
	if !mayShare(before, req, got) {
		t.Fatalf("step %d: Allocate(%+v) = %s, which %v held and may not share", step, req, got, holdersIn(before, got))
	}
	if _, ok := a.Reserved(got); ok {
		t.Fatalf("step %d: Allocate(%+v) = %s, a node's address", step, req, got)
	}
	if got.Is6() != req.IPv6 {
		t.Fatalf("step %d: Allocate(%+v) = %s, of the other family", step, req, got)
	}
	var prev netip.Addr
	for _, h := range before {
		if h.Key == req.Key && h.Addr.Is6() == req.IPv6 {
			prev = h.Addr
		}
	}
	if req.Address.IsValid() && got != req.Address {
		t.Fatalf("step %d: Allocate(%+v) = %s, not the requested address", step, req, got)
	}
	pool := a.PoolOf(got)
	if req.Pool != "" && pool != req.Pool {
		t.Fatalf("step %d: Allocate(%+v) = %s of pool %q", step, req, got, pool)
	}
	if got == prev {
		return // kept: it fits the request, whatever the pools say now
	}
	if req.Address.IsValid() {
		return
	}
	// With a sharing key and others of the key holding addresses: the
	// lowest of them it may join, never an address of its own.
	if group := groupOf(before, req); len(group) > 0 {
		for _, g := range group {
			if g == got {
				return
			}
			if canJoin(a, before, req, g) {
				t.Fatalf("step %d: Allocate(%+v) = %s, but it could join the lower %s of its group %v", step, req, got, g, group)
			}
		}
		t.Fatalf("step %d: Allocate(%+v) = %s, not an address of its group %v", step, req, got, group)
	}
	if holderIn(before, got, req.Key) {
		t.Fatalf("step %d: Allocate(%+v) = %s, which %v held", step, req, got, holdersIn(before, got))
	}
	if pool == "" {
		t.Fatalf("step %d: Allocate(%+v) = %s, in no pool", step, req, got)
	}
	var p *Pool
	for _, q := range a.pools {
		if q.Name == pool {
			p = q
		}
	}
	if ok, why := p.Eligible(req.Namespace, nil, nil); !ok {
		t.Fatalf("step %d: Allocate(%+v) = %s of pool %s, which %s", step, req, got, pool, why)
	}
	if req.Address.IsValid() || got == prev {
		return
	}
	if req.Pool == "" && !p.AutoAssign {
		t.Fatalf("step %d: Allocate(%+v) = %s of pool %s, which does not auto-assign", step, req, got, pool)
	}
	// Lowest free address of the first pool with one.
	for _, q := range a.pools {
		if req.Pool != "" && q.Name != req.Pool {
			continue
		}
		if req.Pool == "" && (!q.AutoAssign || !eligible(q, req)) {
			continue
		}
		for x := range q.all() {
			if x.Is6() != req.IPv6 {
				continue
			}
			if x == got {
				return
			}
			if _, reserved := a.Reserved(x); reserved {
				continue
			}
			if !holderIn(before, x, "") {
				t.Fatalf("step %d: Allocate(%+v) = %s, but %s of pool %s was free", step, req, got, x, q.Name)
			}
		}
	}
}

// checkNoFree: a failed allocation without a requested address means no
// pool the Service may use had a free address, or, with a sharing key,
// that it could join none of its group's addresses.
func checkNoFree(t *testing.T, a *Allocator, req Request, err error, step int) {
	t.Helper()
	if req.Address.IsValid() {
		if mayShare(a.Holdings(), req, req.Address) && ReasonOf(err) == ReasonAddressTaken {
			t.Fatalf("step %d: Allocate(%+v): %v, but it may share it", step, req, err)
		}
		return
	}
	if group := groupOf(a.Holdings(), req); len(group) > 0 {
		if ReasonOf(err) != ReasonSharingConflict {
			t.Fatalf("step %d: Allocate(%+v): %v, want a sharing conflict with its group %v", step, req, err, group)
		}
		for _, g := range group {
			if canJoin(a, a.Holdings(), req, g) {
				t.Fatalf("step %d: Allocate(%+v) failed (%v), but it could join %s of its group", step, req, err, g)
			}
		}
		return
	}
	for _, q := range a.pools {
		if (req.Pool != "" && q.Name != req.Pool) || (req.Pool == "" && !q.AutoAssign) || !eligible(q, req) {
			continue
		}
		for x := range q.all() {
			if _, reserved := a.Reserved(x); reserved || x.Is6() != req.IPv6 {
				continue
			}
			if len(a.Holders(x)) == 0 {
				t.Fatalf("step %d: Allocate(%+v) failed (%v) with %s of pool %s free", step, req, err, x, q.Name)
			}
		}
	}
}

func eligible(p *Pool, req Request) bool {
	ok, _ := p.Eligible(req.Namespace, req.NamespaceLabels, req.Labels)
	return ok
}

// all yields every usable address of the pool in order.
func (p *Pool) all() func(func(netip.Addr) bool) {
	return func(yield func(netip.Addr) bool) {
		for _, s := range p.spans {
			for x := s.lo; x.IsValid() && x.Compare(s.hi) <= 0; x = x.Next() {
				if p.contains(x) && !yield(x) {
					return
				}
			}
		}
	}
}

func checkInvariants(t *testing.T, a *Allocator, step int, op string) {
	t.Helper()
	n := 0
	for x, keys := range a.holders {
		n += len(keys)
		if len(keys) == 0 || !slices.IsSorted(keys) {
			t.Fatalf("step %d (%s): %s has holders %v", step, op, x, keys)
		}
		for i, key := range keys {
			if h := a.held[holdKey{key, x.Is6()}]; h == nil || h.addr != x {
				t.Fatalf("step %d (%s): %s is among the holders of %s, but holds %v", step, op, key, x, h)
			}
			// Every pair of holders may share.
			for _, other := range keys[:i] {
				h, o := a.held[holdKey{key, x.Is6()}], a.held[holdKey{other, x.Is6()}]
				if h.sharing == "" || h.sharing != o.sharing || h.namespace != o.namespace || len(commonPorts(h.ports, o.ports)) > 0 {
					t.Fatalf("step %d (%s): %s (%+v) and %s (%+v) share %s", step, op, key, *h, other, *o, x)
				}
			}
		}
	}
	if n != len(a.held) {
		t.Fatalf("step %d (%s): the addresses list %d holders, %d Services hold one", step, op, n, len(a.held))
	}
	for _, p := range a.pools {
		var n, size uint64
		for x := range a.holders {
			if _, reserved := a.reserved[x]; p.contains(x) && !reserved {
				n++
			}
		}
		for x := range p.all() {
			if _, reserved := a.Reserved(x); !reserved {
				size++
			}
		}
		if used, sz, _ := a.Usage(p.Name); used != n || sz != size {
			t.Fatalf("step %d (%s): pool %s usage %d/%d, counted %d/%d", step, op, p.Name, used, sz, n, size)
		}
	}
	for i := 1; i < len(a.pools); i++ {
		if !Less(a.pools[i-1], a.pools[i]) {
			t.Fatalf("step %d (%s): pools out of order: %s before %s", step, op, a.pools[i-1].Name, a.pools[i].Name)
		}
		for j := range i {
			if _, ok := overlap(a.pools[i], a.pools[:j+1]); ok {
				t.Fatalf("step %d (%s): pools %s and %s overlap", step, op, a.pools[i].Name, a.pools[j].Name)
			}
		}
	}
}

func TestRandomWalk(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			walk(t, r.IntN, 2000)
		})
	}
}

// FuzzWalk drives the walk with the fuzzer's bytes.
func FuzzWalk(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 5, 5, 5, 5, 3, 3, 3, 3})
	f.Add(slices.Repeat([]byte{0, 1, 2, 3, 4, 5, 6, 7}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func(n int) int {
			if len(data) < 2 {
				return 0
			}
			v := int(binary.LittleEndian.Uint16(data))
			data = data[2:]
			return v % n
		}
		walk(t, next, len(data)/4)
	})
}

// FuzzParsePool: no panic on any entry, and an accepted pool contains
// exactly what its size says at its ends.
func FuzzParsePool(f *testing.F) {
	for _, s := range []string{"10.0.0.0/28", "10.0.0.1-10.0.0.9", "1.2.3.4", "::/0", "10.0.0.0/33", "-", "/", "0.0.0.0/0", "2001:db8::/120", "2001:db8::ff-2001:db8::1:0", "::ffff:0.0.0.0/96"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, entry string, avoid bool) {
		p, err := ParsePool("p", api.AddressPoolSpec{Addresses: []string{entry}, AvoidBuggyIPs: avoid})
		if err != nil {
			return
		}
		if p.Size() == 0 || p.spans[0].lo.Is4() && p.Size() > 1<<32 {
			t.Fatalf("%q: size %d", entry, p.Size())
		}
		s := p.spans[0]
		for _, x := range []netip.Addr{s.lo, s.hi} {
			if want := !(avoid && buggy(x)); p.Contains(x) != want {
				t.Fatalf("%q: Contains(%s) != %v", entry, x, want)
			}
		}
		if prev := s.lo.Prev(); prev.IsValid() && p.Contains(prev) {
			t.Fatalf("%q: contains the address before it", entry)
		}
		if next := s.hi.Next(); next.IsValid() && p.Contains(next) {
			t.Fatalf("%q: contains the address after it", entry)
		}
	})
}
