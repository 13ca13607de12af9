package decap

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// TestSetupDecapWidensIPv4OnlyState: a host set up by an xlb whose keys
// and values held IPv4 addresses only (testdata/backend-ipv4only.o, the
// backend object of commit 88f639a) is set up again by this one: every
// map that holds addresses is replaced, and its entries, the flows and
// translations among them, are carried over in the new layout.
func TestSetupDecapWidensIPv4OnlyState(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	old, err := ebpf.LoadCollectionSpec("testdata/backend-ipv4only.o")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(pin, 0o700); err != nil {
		t.Fatal(err)
	}
	pod, client := netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("10.0.2.2")
	be := func(a netip.Addr) [4]byte { return a.As4() }
	port := func(p uint16) [2]byte { return [2]byte{byte(p >> 8), byte(p)} }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	v, p, c := be(fxVIP), be(pod), be(client)
	p80, p8080, p40000 := port(80), port(8080), port(40000)
	// Old entries (key, value) by map, in the IPv4-only layouts.
	oldEntries := map[string][][2][]byte{
		"nat_pods":      {{p[:], {1}}},
		"nat_pod_netns": {{p[:], {7, 0, 0, 0}}},
		"nat_svcs":      {{cat(v[:], p[:], p80[:], []byte{6, 0}), p8080[:]}},
		"nat_flows":     {{cat(p[:], c[:], p8080[:], p40000[:], []byte{6, 0, 0, 0}), cat(v[:], p80[:], []byte{0, 0})}},
		"chain_gens":    {{cat(v[:], p80[:], []byte{6, 0}), {0x10, 0x27, 0, 0}}},
		"chain_to":      {{cat([]byte{24, 0, 0, 0}, []byte{10, 0, 4, 0}), {1}}},
	}
	for name, ms := range old.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		ms.Pinning = ebpf.PinByName
		m, err := ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: pin})
		if err != nil {
			t.Fatalf("pin old %s: %v", name, err)
		}
		for _, e := range oldEntries[name] {
			if err := m.Put(e[0], e[1]); err != nil {
				t.Fatalf("old %s: %v", name, err)
			}
		}
		m.Close()
	}

	err = netns.Do(f.Name, func() error {
		_, err := Setup(Options{Interface: "veth0", HostAddrs: []netip.Addr{fxBackend}, VIPs: []netip.Addr{fxVIP},
			PinPath: pin, Chain: chainSets})
		return err
	})
	if err != nil {
		t.Fatalf("set-up over IPv4-only state: %v", err)
	}
	// The same entries, in union xlb_addr's layout.
	A := func(a netip.Addr) wire.Addr { return wire.AddrOf(a) }
	want := map[string][2]any{
		"nat_pods":      {A(pod), uint8(1)},
		"nat_pod_netns": {A(pod), uint32(7)},
		"nat_svcs":      {wire.NATSvcKey{Vip: A(fxVIP), Pod: A(pod), Port: wire.Port(80), Proto: 6}, wire.Port(8080)},
		"nat_flows": {wire.NATFlowKey{Pod: A(pod), Client: A(client), PodPort: wire.Port(8080), ClientPort: wire.Port(40000), Proto: 6},
			wire.NATVIP{Vip: A(fxVIP), Port: wire.Port(80)}},
		"chain_gens": {wire.ChainSvcKey{Vip: A(fxVIP), Port: wire.Port(80), Proto: 6}, uint32(10000)},
		"chain_to":   {wire.PrefixKey(netip.MustParsePrefix("10.0.4.0/24")), uint8(1)},
	}
	for name, kv := range want {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pin, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, m.ValueSize())
		if err := m.Lookup(kv[0], &got); err != nil {
			t.Errorf("%s: the old entry is not in the new map: %v", name, err)
		} else if w, _ := binary.Append(nil, binary.NativeEndian, kv[1]); string(w) != string(got) {
			t.Errorf("%s: value % x, want % x", name, got, w)
		}
		m.Close()
	}
}
