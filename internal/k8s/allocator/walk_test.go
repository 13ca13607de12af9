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
}

// walk applies random operations to an allocator and checks after each
// that no address is held twice, that usage counts are right, and that
// every allocation obeys the rules. next supplies the randomness.
func walk(t *testing.T, next func(n int) int, steps int) {
	a := New()
	keys := []string{"ns1/a", "ns1/b", "ns1/c", "ns2/a", "ns2/b", "ns2/c", "ns3/a", "ns3/b", "ns3/c", "ns3/d"}
	addr := func() netip.Addr { return fromU32(toU32(netip.MustParseAddr("10.0.0.0")) + uint32(next(270))) }
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
			key := keys[next(len(keys))]
			a.Release(key)
			op = "Release " + key
			if _, ok := a.Lookup(key); ok {
				t.Fatalf("step %d: %s still holds an address", step, op)
			}
		case 2:
			key, x := keys[next(len(keys))], addr()
			err := a.Assign(key, x)
			op = fmt.Sprintf("Assign(%s, %s)", key, x)
			if h, ok := holderIn(before, x); ok && h != key {
				if err == nil {
					t.Fatalf("step %d: %s succeeded though %s holds it", step, op, h)
				}
			} else if err != nil {
				t.Fatalf("step %d: %s: %v", step, op, err)
			}
		default:
			key := keys[next(len(keys))]
			ns := key[:3]
			req := Request{Key: key, Namespace: ns}
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

func holderIn(hs []Holding, x netip.Addr) (string, bool) {
	for _, h := range hs {
		if h.Addr == x {
			return h.Key, true
		}
	}
	return "", false
}

// checkAllocation checks a successful Allocate against the rules.
func checkAllocation(t *testing.T, a *Allocator, before []Holding, req Request, got netip.Addr, step int) {
	t.Helper()
	if h, _ := a.Holder(got); h != req.Key {
		t.Fatalf("step %d: Allocate(%+v) = %s, held by %q", step, req, got, h)
	}
	if h, ok := holderIn(before, got); ok && h != req.Key {
		t.Fatalf("step %d: Allocate(%+v) = %s, which %s held", step, req, got, h)
	}
	if _, ok := a.Reserved(got); ok {
		t.Fatalf("step %d: Allocate(%+v) = %s, a node's address", step, req, got)
	}
	var prev netip.Addr
	for _, h := range before {
		if h.Key == req.Key {
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
			if x == got {
				return
			}
			if _, reserved := a.Reserved(x); reserved {
				continue
			}
			if _, held := holderIn(before, x); !held {
				t.Fatalf("step %d: Allocate(%+v) = %s, but %s of pool %s was free", step, req, got, x, q.Name)
			}
		}
	}
}

// checkNoFree: a failed allocation without a requested address means no
// pool the Service may use had a free address.
func checkNoFree(t *testing.T, a *Allocator, req Request, err error, step int) {
	t.Helper()
	if req.Address.IsValid() {
		return
	}
	for _, q := range a.pools {
		if (req.Pool != "" && q.Name != req.Pool) || (req.Pool == "" && !q.AutoAssign) || !eligible(q, req) {
			continue
		}
		for x := range q.all() {
			if _, reserved := a.Reserved(x); reserved {
				continue
			}
			if _, held := a.Holder(x); !held {
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
			for x := uint64(s.lo); x <= uint64(s.hi); x++ {
				if p.contains(uint32(x)) && !yield(fromU32(uint32(x))) {
					return
				}
			}
		}
	}
}

func checkInvariants(t *testing.T, a *Allocator, step int, op string) {
	t.Helper()
	if len(a.holder) != len(a.held) {
		t.Fatalf("step %d (%s): %d addresses held by %d Services", step, op, len(a.holder), len(a.held))
	}
	for key, x := range a.held {
		if a.holder[x] != key {
			t.Fatalf("step %d (%s): %s holds %s, whose holder is %q", step, op, key, fromU32(x), a.holder[x])
		}
	}
	for _, p := range a.pools {
		var n, size uint64
		for x := range a.holder {
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
	for _, s := range []string{"10.0.0.0/28", "10.0.0.1-10.0.0.9", "1.2.3.4", "::/0", "10.0.0.0/33", "-", "/", "0.0.0.0/0"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, entry string, avoid bool) {
		p, err := ParsePool("p", api.AddressPoolSpec{Addresses: []string{entry}, AvoidBuggyIPs: avoid})
		if err != nil {
			return
		}
		if p.Size() == 0 || p.Size() > 1<<32 {
			t.Fatalf("%q: size %d", entry, p.Size())
		}
		s := p.spans[0]
		for _, x := range []uint32{s.lo, s.hi} {
			if want := !(avoid && buggy(x)); p.Contains(fromU32(x)) != want {
				t.Fatalf("%q: Contains(%s) != %v", entry, fromU32(x), want)
			}
		}
		if s.lo > 0 && p.Contains(fromU32(s.lo-1)) {
			t.Fatalf("%q: contains the address before it", entry)
		}
		if s.hi < ^uint32(0) && p.Contains(fromU32(s.hi+1)) {
			t.Fatalf("%q: contains the address after it", entry)
		}
	})
}
