package wire

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/xlbproject/xlb/internal/flowhash"
)

// types are the Go mirrors by the name of their C type.
var types = map[string]any{
	"xlb_addr": Addr{}, "xlb_counter": Counter{}, "xlb_gue_hint": GUEHint{},
	"svc_slot": SvcSlot{}, "backend": Backend{}, "xlb_table_entry": TableEntry(0), "chain_entry": ChainEntry{},
	"ct_key": CtKey{}, "ct_entry": CtEntry{}, "nh_entry": NextHop{}, "backend_state": BackendState{},
	"chain_cfg": ChainCfg{}, "chain_peer_key": ChainPeerKey{}, "chain_svc_key": ChainSvcKey{},
	"nat_svc_key": NATSvcKey{}, "nat_flow_key": NATFlowKey{}, "nat_vip": NATVIP{}, "nat_rev_key": NATRevKey{},
	"xlb_deny_cell": DenyCell{}, "xlb_deny6_node": Deny6Node{}, "xlb_ranges4": Ranges4{}, "xlb_ranges6": Ranges6{},
	"lbnat_key": SessionKey{}, "lbnat_session": Session{}, "lbnat_cfg": NATCfg{}, "lbnat_be_key": NATBackendKey{},
}

// TestTypesMatchC holds every Go mirror to its C type in the compiled
// object: the same size and member offsets, and the sizes the programs'
// static assertions name.
func TestTypesMatchC(t *testing.T) {
	spec, err := loadWire()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range types {
		typ, err := spec.Types.AnyTypeByName(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := Layout(v, typ); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, c := range []struct {
		v    any
		size uintptr
	}{{Addr{}, 16}, {GUEHint{}, 16}, {TableEntry(0), 8}, {ChainEntry{}, 56}, {SvcSlot{}, 32}, {ChainPeerKey{}, 20}, {CtKey{}, 40}, {Backend{}, 24},
		{SessionKey{}, 40}, {Session{}, 88}, {NATCfg{}, 64}, {NATBackendKey{}, 20}, {DenyCell{}, 32}, {Deny6Node{}, 96}, {Ranges4{}, 512}, {Ranges6{}, 2048}} {
		if got := reflect.TypeOf(c.v).Size(); got != c.size {
			t.Errorf("%T: %d bytes, want %d", c.v, got, c.size)
		}
	}
}

// enum reads the enumerators of a C enum from the compiled object.
func enum(t *testing.T, name string) []btf.EnumValue {
	t.Helper()
	spec, err := loadWire()
	if err != nil {
		t.Fatal(err)
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName(name, &e); err != nil {
		t.Fatalf("enum %s: %v", name, err)
	}
	return e.Values
}

// enumNames lists an enum's enumerators without the last one (its
// count), checking that they number 0, 1, ... and that the count is
// their number.
func enumNames(t *testing.T, name string) []string {
	t.Helper()
	vals := enum(t, name)
	var out []string
	for i, v := range vals {
		if v.Value != uint64(i) {
			t.Fatalf("enum %s: %s = %d, want %d", name, v.Name, v.Value, i)
		}
		if i < len(vals)-1 {
			out = append(out, v.Name)
		}
	}
	return out
}

func lower(names []string, prefix string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToLower(strings.TrimPrefix(n, prefix))
	}
	return out
}

func TestReasonNamesMatchC(t *testing.T) {
	got := lower(enumNames(t, "xlb_reason"), "XLB_")
	if strings.Join(got, ",") != strings.Join(ReasonNames, ",") {
		t.Fatalf("ReasonNames out of step with enum xlb_reason:\n C: %v\nGo: %v", got, ReasonNames)
	}
}

func TestNATStatNamesMatchC(t *testing.T) {
	got := lower(enumNames(t, "nat_stat"), "")
	if strings.Join(got, ",") != strings.Join(NATStatNames, ",") {
		t.Fatalf("NATStatNames out of step with enum nat_stat:\n C: %v\nGo: %v", got, NATStatNames)
	}
}

func TestLBNATStatNamesMatchC(t *testing.T) {
	got := lower(enumNames(t, "lbnat_stat"), "LBNAT_")
	want := []string{"created", "alloc_failed", "expired", "no_reply", "rev_miss", "fragment", "icmp",
		"promoted", "promote_failed", "fwd", "rev", "ended", "reclaimed", "alloc_fast_fail"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("enum lbnat_stat changed: %v; update LBNATStatNames (%v) and this test", got, LBNATStatNames)
	}
	if len(LBNATStatNames) != len(got) {
		t.Fatalf("LBNATStatNames has %d names, enum %d", len(LBNATStatNames), len(got))
	}
}

// The decapsulation and chaining counters have names of their own: the
// enums are fixed here, so that a change to one fails until its names
// follow.
func TestDecapNamesMatchC(t *testing.T) {
	got := lower(enumNames(t, "decap_stat"), "")
	want := []string{"decap_ipip", "decap_gue", "decap_pass", "decap_drop_inner", "decap_drop_gue"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("enum decap_stat changed: %v; update DecapStatNames (%v) and this test", got, DecapStatNames)
	}
	if len(DecapStatNames) != len(got) {
		t.Fatalf("DecapStatNames has %d names, enum %d", len(DecapStatNames), len(got))
	}
}

func TestChainNamesMatchC(t *testing.T) {
	got := lower(enumNames(t, "chain_stat"), "CHAIN_")
	want := []string{"syn", "socket", "syncookie", "chained", "stale_drop", "no_socket", "no_route", "no_neighbour",
		"drop_untrusted_source", "drop_unknown_owner"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("enum chain_stat changed: %v; update ChainStatNames (%v) and this test", got, ChainStatNames)
	}
	if len(ChainStatNames) != len(got) {
		t.Fatalf("ChainStatNames has %d names, enum %d", len(ChainStatNames), len(got))
	}
}

// The Go constants are the C enumerators (the generated ones: the test
// guards the names they are exported under).
func TestEnumConstants(t *testing.T) {
	for _, c := range []struct {
		enum, name string
		goValue    uint64
	}{
		{"xlb_encap", "XLB_ENCAP_IPIP", uint64(EncapIPIP)},
		{"xlb_encap", "XLB_ENCAP_GUE", uint64(EncapGUE)},
		{"xlb_encap", "XLB_ENCAP_GUE_HINT", uint64(EncapGUEHint)},
		{"xlb_encap", "XLB_ENCAP_NAT", uint64(EncapNAT)},
		{"xlb_encap", "XLB_ENCAP_DNAT", uint64(EncapDNAT)},
		{"lbnat_state", "LBNAT_SYN", uint64(SessionSyn)},
		{"lbnat_state", "LBNAT_ESTABLISHED", uint64(SessionEstablished)},
		{"lbnat_state", "LBNAT_CLOSING", uint64(SessionClosing)},
		{"lbnat_state", "LBNAT_UDP", uint64(SessionUDP)},
		{"lbnat_flag", "LBNAT_REPLIED", uint64(SessionReplied)},
		{"lbnat_flag", "LBNAT_DNAT", uint64(SessionDNAT)},
		{"lbnat_cfg_flag", "LBNAT_CFG_DNAT", uint64(NATCfgDNAT)},
		{"lbnat_stat", "LBNAT_CREATED", uint64(LBNATCreated)},
		{"lbnat_stat", "LBNAT_ALLOC_FAILED", uint64(LBNATAllocFailed)},
		{"lbnat_stat", "LBNAT_EXPIRED", uint64(LBNATExpired)},
		{"lbnat_stat", "LBNAT_NO_REPLY", uint64(LBNATNoReply)},
		{"lbnat_stat", "LBNAT_REV_MISS", uint64(LBNATRevMiss)},
		{"lbnat_stat", "LBNAT_FRAGMENT", uint64(LBNATFragment)},
		{"lbnat_stat", "LBNAT_ICMP", uint64(LBNATICMP)},
		{"lbnat_stat", "LBNAT_PROMOTED", uint64(LBNATPromoted)},
		{"lbnat_stat", "LBNAT_PROMOTE_FAILED", uint64(LBNATPromoteFailed)},
		{"lbnat_stat", "LBNAT_FWD", uint64(LBNATFwd)},
		{"lbnat_stat", "LBNAT_REV", uint64(LBNATRev)},
		{"lbnat_stat", "LBNAT_ENDED", uint64(LBNATEnded)},
		{"xlb_svc_flag", "XLB_SVC_STATEFUL", uint64(SvcStateful)},
		{"xlb_svc_flag", "XLB_SVC_CLIENT_IP", uint64(SvcClientIP)},
		{"xlb_svc_flag", "XLB_SVC_SOURCE_RANGES", uint64(SvcSourceRanges)},
		{"xlb_deny_layout", "XLB_DENY_ROOT_BITS", uint64(DenyRootBits)},
		{"xlb_deny_layout", "XLB_DENY_NODE_BITS", uint64(DenyNodeBits)},
		{"xlb_deny_layout", "XLB_DENY_ALL", uint64(DenyAll)},
		{"chain_cfg_flag", "CHAIN_CFG_SETS", uint64(ChainCfgSets)},
		{"xlb_svc_proto_flag", "XLB_SVC_PROTO_V6", uint64(SvcProtoV6)},
		{"xlb_table_entry_flag", "XLB_TABLE_ENTRY_V6", uint64(TableEntryV6)},
	} {
		found := false
		for _, v := range enum(t, c.enum) {
			if v.Name == c.name {
				found = true
				if v.Value != c.goValue {
					t.Errorf("%s = %d, Go %d", c.name, v.Value, c.goValue)
				}
			}
		}
		if !found {
			t.Errorf("enum %s has no %s", c.enum, c.name)
		}
	}
}

func TestTableEntry(t *testing.T) {
	e := NewTableEntry(7, netip.MustParseAddr("10.0.3.2"))
	if e.Backend() != 7 || AddrFrom4(e.Addr()) != netip.MustParseAddr("10.0.3.2") {
		t.Errorf("entry %#x: backend %d, address %v", uint64(e), e.Backend(), AddrFrom4(e.Addr()))
	}
	// The program reads the id from the low and the address from the high
	// 32 bits of the little-endian word: the address's bytes come last.
	if uint64(e) != 0x0203000a_00000007 {
		t.Errorf("entry %#x, want 0x0203000a00000007", uint64(e))
	}
	if e.V6() {
		t.Errorf("IPv4 entry %#x says IPv6", uint64(e))
	}
	// An IPv6 backend: address 0 with the id's flag, the id unchanged.
	e6 := NewTableEntry(7, netip.MustParseAddr("fd00::3:2"))
	if uint64(e6) != 0x80000007 || !e6.V6() || e6.Backend() != 7 || e6.Addr() != 0 {
		t.Errorf("IPv6 entry %#x: backend %d, v6 %v", uint64(e6), e6.Backend(), e6.V6())
	}
	// No backend: address 0, no flag.
	if none := NewTableEntry(7, netip.Addr{}); uint64(none) != 7 || none.V6() || none.Backend() != 7 {
		t.Errorf("entry without a backend %#x", uint64(none))
	}
}

// An address of either family goes into a map as union xlb_addr holds it
// (IPv4 mapped into IPv6) and comes back as it was; none is all zero.
func TestAddrOf(t *testing.T) {
	for _, c := range []struct {
		addr string
		want [16]byte
	}{
		{"10.99.0.1", [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 99, 14: 0, 15: 1}},
		{"fd00::1", [16]byte{0: 0xfd, 15: 1}},
		{"2001:db8::", [16]byte{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8}},
	} {
		a := netip.MustParseAddr(c.addr)
		got := AddrOf(a)
		if got.Bytes != c.want {
			t.Errorf("AddrOf(%v) = % x, want % x", a, got.Bytes, c.want)
		}
		if got.IP() != a {
			t.Errorf("AddrOf(%v).IP() = %v", a, got.IP())
		}
	}
	// 32.1.13.184 and 2001:db8:: share their first 4 bytes: held apart.
	if AddrOf(netip.MustParseAddr("32.1.13.184")) == AddrOf(netip.MustParseAddr("2001:db8::")) {
		t.Error("an IPv4 and an IPv6 address share a key")
	}
	if AddrOf(netip.Addr{}) != (Addr{}) || (Addr{}).IP().IsValid() {
		t.Error("no address is not all zero")
	}
}

// A prefix of either family in an LPM key: an IPv4 /n counts 96 + n bits
// of its mapped address.
func TestPrefixKey(t *testing.T) {
	for _, c := range []struct {
		prefix string
		bits   uint32
	}{{"10.0.3.0/24", 120}, {"10.0.3.7/32", 128}, {"fd00:1::/64", 64}, {"0.0.0.0/0", 96}} {
		p := netip.MustParsePrefix(c.prefix)
		k := PrefixKey(p)
		if k.Prefixlen != c.bits || k.Addr != AddrOf(p.Addr()) || k.Prefix() != p {
			t.Errorf("PrefixKey(%v) = %d %v, back %v", p, k.Prefixlen, k.Addr.IP(), k.Prefix())
		}
	}
}

// An IPv4 service's slot key is the one word the program compares; an
// IPv6 service's spills into Vip6 and is marked in Proto, so that it
// never equals an IPv4 key whose VIP has its first 4 bytes.
func TestSvcKey(t *testing.T) {
	k := SvcKey(netip.MustParseAddr("10.99.0.1"), 80, ProtoTCP)
	if k.Vip != 0x0100630a || k.Port != 0x5000 || k.Proto != ProtoTCP || k.Vip6 != [3]uint32{} {
		t.Errorf("IPv4 key %+v", k)
	}
	v6 := netip.MustParseAddr("2001:db8::1")
	k6 := SvcKey(v6, 80, ProtoTCP)
	if k6.Vip != 0xb80d0120 || k6.Proto != ProtoTCP|SvcProtoV6 || k6.Vip6 != [3]uint32{0, 0, 0x01000000} {
		t.Errorf("IPv6 key %+v", k6)
	}
	if k4 := SvcKey(netip.MustParseAddr("32.1.13.184"), 80, ProtoTCP); k4.Vip == k6.Vip && k4.Proto == k6.Proto {
		t.Error("an IPv4 and an IPv6 key share the compared word")
	}
	for _, c := range []SvcSlot{k, k6} {
		vip, port, proto := c.Service()
		if want := SvcKey(vip, port, proto); want != c {
			t.Errorf("slot %+v gives back %v %d %d", c, vip, port, proto)
		}
	}
}

func TestAddrAndPort(t *testing.T) {
	a := netip.MustParseAddr("10.99.0.1")
	if Addr4(a) != 0x0100630a || AddrFrom4(Addr4(a)) != a {
		t.Errorf("Addr4(%v) = %#x", a, Addr4(a))
	}
	if Addr4(netip.MustParseAddr("fd00::1")) != 0 {
		t.Error("Addr4 of an IPv6 address is not 0")
	}
	if Port(80) != 0x5000 || PortFrom(Port(80)) != 80 {
		t.Errorf("Port(80) = %#x", Port(80))
	}
}

// Every flow hash has a name that parses back to it, the default is the
// zero value (which the LB program's flow_hash starts as), and any other
// name is an error that names the known ones.
func TestFlowHashNames(t *testing.T) {
	for _, v := range enum(t, "xlb_flow_hash") {
		k := FlowHash(v.Value)
		if !k.Known() {
			t.Errorf("%s (%d) has no name", v.Name, v.Value)
			continue
		}
		got, err := flowhash.Parse(k.String())
		if err != nil || got != k {
			t.Errorf("Parse(%q) = %v, %v; want %v", k.String(), got, err, k)
		}
	}
	if FlowHashFmix64.String() != flowhash.Fmix64Name || FlowHashLookup3.String() != flowhash.Lookup3Name {
		t.Errorf("names %q and %q", FlowHashFmix64, FlowHashLookup3)
	}
	if FlowHashFmix64 != 0 {
		t.Errorf("the default, fmix64, is %d: want the zero value", uint32(FlowHashFmix64))
	}
	for _, bad := range []string{"", "jhash", "FMIX64", " fmix64", "lookup3 "} {
		_, err := flowhash.Parse(bad)
		if err == nil || !strings.Contains(err.Error(), "fmix64") || !strings.Contains(err.Error(), "lookup3") {
			t.Errorf("Parse(%q): %v, want an error naming the flow hashes", bad, err)
		}
	}
	if FlowHash(7).Known() || FlowHash(7).String() != "flow hash 7" {
		t.Errorf("an unknown hash: known %v, %q", FlowHash(7).Known(), FlowHash(7))
	}
}
