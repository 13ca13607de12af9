package allocator

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

func ptr[T any](v T) *T { return &v }

func TestParsePool(t *testing.T) {
	ip := netip.MustParseAddr
	tests := []struct {
		name     string
		spec     api.AddressPoolSpec
		size     uint64
		in, out  []string // addresses the pool must and must not contain
		wantErrs []string // substrings of the error; nil: valid
	}{
		{name: "cidr", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/28"}}, size: 16,
			in: []string{"10.99.0.0", "10.99.0.15"}, out: []string{"10.98.255.255", "10.99.0.16"}},
		{name: "host route", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.7/32"}}, size: 1,
			in: []string{"10.99.0.7"}, out: []string{"10.99.0.6", "10.99.0.8"}},
		{name: "range with spaces", spec: api.AddressPoolSpec{Addresses: []string{" 10.99.0.10 - 10.99.0.20 "}}, size: 11,
			in: []string{"10.99.0.10", "10.99.0.20"}, out: []string{"10.99.0.9", "10.99.0.21"}},
		{name: "one-address range", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.10-10.99.0.10"}}, size: 1,
			in: []string{"10.99.0.10"}},
		{name: "several entries", spec: api.AddressPoolSpec{Addresses: []string{"10.99.1.0/30", "10.99.0.0/31"}}, size: 6,
			in: []string{"10.99.0.1", "10.99.1.3"}, out: []string{"10.99.0.2", "10.99.1.4"}},
		{name: "adjacent entries", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/31", "10.99.0.2-10.99.0.3"}}, size: 4},
		{name: "avoid buggy /23", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/23"}, AvoidBuggyIPs: true}, size: 512 - 4,
			in: []string{"10.99.0.1", "10.99.0.254", "10.99.1.1"}, out: []string{"10.99.0.0", "10.99.0.255", "10.99.1.0", "10.99.1.255"}},
		{name: "avoid buggy range across /24", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.250-10.99.1.5"}, AvoidBuggyIPs: true}, size: 12 - 2},
		{name: "whole space", spec: api.AddressPoolSpec{Addresses: []string{"0.0.0.0/0"}}, size: 1 << 32,
			in: []string{"0.0.0.0", "255.255.255.255"}},

		{name: "no addresses", spec: api.AddressPoolSpec{}, wantErrs: []string{"spec.addresses is empty"}},
		{name: "empty entry", spec: api.AddressPoolSpec{Addresses: []string{" "}}, wantErrs: []string{`spec.addresses[0] " ": is empty`}},
		{name: "bad prefix length", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/33"}}, wantErrs: []string{`spec.addresses[0] "10.99.0.0/33": is not a CIDR`}},
		{name: "host bits", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.5/28"}}, wantErrs: []string{"host bits set: the network is 10.99.0.0/28"}},
		{name: "ipv6 cidr", spec: api.AddressPoolSpec{Addresses: []string{"fd00::/120"}}, size: 256, in: []string{"fd00::", "fd00::ff"}, out: []string{"fd00::100", "10.0.0.0"}},
		{name: "ipv6 range, avoidBuggyIPs applies to IPv4 only", spec: api.AddressPoolSpec{Addresses: []string{"2001:db8::ff-2001:db8::100"}, AvoidBuggyIPs: true}, size: 2, in: []string{"2001:db8::ff", "2001:db8::100"}},
		{name: "dual-stack pool", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/30", "fd00::/126"}}, size: 8, in: []string{"10.99.0.3", "fd00::3"}, out: []string{"fd00::4", "::a63:4"}},
		{name: "huge ipv6 cidr", spec: api.AddressPoolSpec{Addresses: []string{"2001:db8::/48"}}, size: math.MaxUint64, in: []string{"2001:db8:0:ffff:ffff:ffff:ffff:ffff"}},
		{name: "range mixing families", spec: api.AddressPoolSpec{Addresses: []string{"10.0.0.1-fd00::1"}}, wantErrs: []string{"mixes IPv4 and IPv6"}},
		{name: "ipv6 with zone", spec: api.AddressPoolSpec{Addresses: []string{"fd00::1%eth0-fd00::3"}}, wantErrs: []string{"has a zone"}},
		{name: "single ipv6 address", spec: api.AddressPoolSpec{Addresses: []string{"fd00::7"}}, wantErrs: []string{"write it as a CIDR: fd00::7/128"}},
		{name: "ipv4-mapped", spec: api.AddressPoolSpec{Addresses: []string{"::ffff:10.0.0.1-::ffff:10.0.0.3"}}, wantErrs: []string{"IPv4-mapped", "(10.0.0.1)"}},
		{name: "reversed range", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.20-10.99.0.10"}}, wantErrs: []string{"the start 10.99.0.20 comes after the end 10.99.0.10"}},
		{name: "range end not an address", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.1-10.99.0"}}, wantErrs: []string{`"10.99.0" is not an address`}},
		{name: "single address", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.1"}}, wantErrs: []string{"write it as a CIDR: 10.99.0.1/32"}},
		{name: "garbage", spec: api.AddressPoolSpec{Addresses: []string{"ten"}}, wantErrs: []string{"neither a CIDR"}},
		{name: "every bad entry named", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/28", "x", "10.99.1.0/33"}},
			wantErrs: []string{`spec.addresses[1] "x"`, `spec.addresses[2] "10.99.1.0/33"`}},
		{name: "overlap inside the pool", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/28", "10.99.0.8-10.99.0.20"}},
			wantErrs: []string{`"10.99.0.8-10.99.0.20" overlaps "10.99.0.0/28"`}},
		{name: "negative priority", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/28"}, ServiceAllocation: &api.ServiceAllocation{Priority: -1}},
			wantErrs: []string{"priority -1 is negative"}},
		{name: "bad selector", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.0/28"}, ServiceAllocation: &api.ServiceAllocation{
			ServiceSelectors: []api.LabelSelector{{}, {MatchExpressions: []api.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}}},
			wantErrs: []string{"spec.serviceAllocation.serviceSelectors[1]", "Near"}},
		{name: "avoid buggy leaves nothing", spec: api.AddressPoolSpec{Addresses: []string{"10.99.0.255/32"}, AvoidBuggyIPs: true},
			wantErrs: []string{"no usable address", "10.99.0.255/32"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePool("p1", tt.spec)
			if tt.wantErrs != nil {
				if err == nil {
					t.Fatalf("ParsePool accepted %v, want an error", tt.spec.Addresses)
				}
				for _, w := range append(tt.wantErrs, `address pool "p1"`) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Size() != tt.size {
				t.Errorf("Size = %d, want %d", p.Size(), tt.size)
			}
			for _, a := range tt.in {
				if !p.Contains(ip(a)) {
					t.Errorf("Contains(%s) = false, want true", a)
				}
			}
			for _, a := range tt.out {
				if p.Contains(ip(a)) {
					t.Errorf("Contains(%s) = true, want false", a)
				}
			}
		})
	}
}

func TestParsePoolDefaults(t *testing.T) {
	p, err := ParsePool("p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/30"}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.AutoAssign || p.Priority != 0 {
		t.Errorf("defaults: AutoAssign %v Priority %d, want true 0", p.AutoAssign, p.Priority)
	}
	p, err = ParsePool("p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/30"}, AutoAssign: ptr(false),
		ServiceAllocation: &api.ServiceAllocation{Priority: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if p.AutoAssign || p.Priority != 3 {
		t.Errorf("AutoAssign %v Priority %d, want false 3", p.AutoAssign, p.Priority)
	}
}

// The closed-form count of usable addresses agrees with counting them one
// by one.
func TestSpanCount(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		lo := r.Uint32N(1 << 12)
		if r.IntN(4) == 0 {
			lo = ^uint32(0) - r.Uint32N(1<<10) // near the top of the space
		}
		hi := lo + r.Uint32N(700)
		if hi < lo {
			hi = ^uint32(0)
		}
		s := span{lo: fromU32(lo), hi: fromU32(hi)}
		for _, avoid := range []bool{false, true} {
			var want uint64
			for x := uint64(lo); x <= uint64(hi); x++ {
				if !avoid || !buggy(fromU32(uint32(x))) {
					want++
				}
			}
			if got := s.count(avoid); got != want {
				t.Fatalf("span %s-%s avoidBuggy=%v: count %d, want %d", fromU32(lo), fromU32(hi), avoid, got, want)
			}
		}
	}
}

func TestEligible(t *testing.T) {
	sel := func(k, v string) api.LabelSelector {
		return api.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	tests := []struct {
		name     string
		sa       *api.ServiceAllocation
		ns       string
		nsLabels map[string]string
		labels   map[string]string
		want     bool
		why      string
	}{
		{name: "no restriction", ns: "a", want: true},
		{name: "namespace listed", sa: &api.ServiceAllocation{Namespaces: []string{"a", "b"}}, ns: "b", want: true},
		{name: "namespace not listed", sa: &api.ServiceAllocation{Namespaces: []string{"a", "b"}}, ns: "c", why: "serves namespaces a, b only"},
		{name: "namespace labels match one selector", sa: &api.ServiceAllocation{NamespaceSelectors: []api.LabelSelector{sel("team", "x"), sel("team", "y")}},
			ns: "c", nsLabels: map[string]string{"team": "y"}, want: true},
		{name: "namespace labels match none", sa: &api.ServiceAllocation{NamespaceSelectors: []api.LabelSelector{sel("team", "x")}},
			ns: "c", nsLabels: map[string]string{"team": "y"}, why: `labels of namespace "c" match none`},
		{name: "service labels match", sa: &api.ServiceAllocation{ServiceSelectors: []api.LabelSelector{sel("tier", "web")}},
			labels: map[string]string{"tier": "web", "x": "y"}, want: true},
		{name: "service labels missing", sa: &api.ServiceAllocation{ServiceSelectors: []api.LabelSelector{sel("tier", "web")}},
			why: "this Service's labels match none"},
		{name: "all restrictions apply together", sa: &api.ServiceAllocation{Namespaces: []string{"a"},
			ServiceSelectors: []api.LabelSelector{sel("tier", "web")}}, ns: "a", why: "serviceSelectors"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePool("p", api.AddressPoolSpec{Addresses: []string{"10.0.0.0/30"}, ServiceAllocation: tt.sa})
			if err != nil {
				t.Fatal(err)
			}
			ok, why := p.Eligible(tt.ns, tt.nsLabels, tt.labels)
			if ok != tt.want || !strings.Contains(why, tt.why) || (ok && why != "") {
				t.Errorf("Eligible = %v, %q; want %v, %q", ok, why, tt.want, tt.why)
			}
		})
	}
}

func TestLess(t *testing.T) {
	mk := func(name string, prio int) *Pool { return &Pool{Name: name, Priority: prio} }
	ordered := []*Pool{mk("z", 1), mk("a", 2), mk("b", 2), mk("c", 10), mk("a0", 0), mk("b0", 0)}
	for i := range ordered {
		for j := range ordered {
			if got, want := Less(ordered[i], ordered[j]), i < j; got != want {
				t.Errorf("Less(%s/%d, %s/%d) = %v, want %v", ordered[i].Name, ordered[i].Priority,
					ordered[j].Name, ordered[j].Priority, got, want)
			}
		}
	}
}
