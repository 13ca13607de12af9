package lb

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// affinityService points the fixture service id (key, encap) at backends
// 0 (10.0.3.2) and 1 (10.0.4.2), slot by slot in turn, with client-IP
// affinity set to clientIP, and returns the table and the backends'
// addresses by id.
func affinityService(t *testing.T, d *Dataplane, id uint32, key ServiceKey, encap Encap, clientIP bool) ([]uint32, []netip.Addr) {
	t.Helper()
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = uint32(i % 2)
	}
	if err := d.UpsertService(Service{ID: id, Key: key, Encap: encap, Table: table, ClientIP: clientIP}); err != nil {
		t.Fatal(err)
	}
	return table, []netip.Addr{fxBackend, fxRedirBE}
}

// forwardTo runs frame and returns the backend it was tunnelled to, and
// the outer UDP source port for a GUE frame (0 for IPIP).
func forwardTo(t *testing.T, d *Dataplane, f *fixtureNS, frame []byte) (netip.Addr, uint16) {
	t.Helper()
	v, out := f.Run(t, d.objs.XlbLbProg, frame)
	if v != xdpTX && v != xdpRedirect {
		t.Fatalf("verdict %s, want a forward", verdictNames[v])
	}
	var port uint16
	if out[23] == 17 {
		port = binary.BigEndian.Uint16(out[34:36])
	}
	return netip.AddrFrom4([4]byte(out[30:34])), port
}

// TestLBClientIPAffinity: a service with client-IP affinity sends every
// connection of a client, whatever its source port, TCP and UDP alike,
// to one backend, the one lb.FlowHash predicts without the port, with
// either flow hash; different clients still spread over the backends; a
// GUE tunnel's outer source port still differs per connection; an ICMP
// error about a connection reaches the client's backend. The same
// connections without affinity spread, so the test cannot pass by
// accident of the table.
func TestLBClientIPAffinity(t *testing.T) {
	for _, kind := range []wire.FlowHash{wire.FlowHashFmix64, wire.FlowHashLookup3} {
		t.Run(kind.String(), func(t *testing.T) {
			d, f := newFixtureLBHashing(t, kind)
			for _, c := range []struct {
				name  string
				id    uint32
				key   ServiceKey
				encap Encap
			}{
				{"tcp", 0, ServiceKey{fxVIP, 80, ProtoTCP}, EncapIPIP},
				{"udp", 1, ServiceKey{fxVIP, 53, ProtoUDP}, EncapGUE},
			} {
				t.Run(c.name, func(t *testing.T) {
					frame := func(src netip.Addr, sport uint16) []byte {
						p := tcpTo(fxVIP, c.key.Port)
						if c.key.Proto == ProtoUDP {
							p = pkt{Dst: fxVIP, Dport: c.key.Port, Proto: 17, Payload: []byte("query")}
						}
						p.Src, p.Sport = src, sport
						return p.Frame(f.MAC)
					}
					sports := make([]uint16, 16)
					for i := range sports {
						sports[i] = uint16(1024 + 4099*i)
					}

					// Without affinity, one client's connections spread.
					affinityService(t, d, c.id, c.key, c.encap, false)
					spread := map[netip.Addr]bool{}
					for _, sport := range sports {
						be, _ := forwardTo(t, d, f, frame(fxClient, sport))
						spread[be] = true
					}
					if len(spread) != 2 {
						t.Fatalf("without affinity, %d connections of one client reached %d backends, want both: the test needs ports that spread", len(sports), len(spread))
					}

					table, backends := affinityService(t, d, c.id, c.key, c.encap, true)
					clients := map[netip.Addr]bool{}
					for n := range 16 {
						src := netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + n)})
						hash := FlowHashOf(kind, src, fxVIP, HashedPort(40000, true), c.key.Port, c.key.Proto)
						want := backends[table[Slot(hash, fxTableSize)]]
						ports := map[uint16]bool{}
						for _, sport := range sports {
							be, port := forwardTo(t, d, f, frame(src, sport))
							if be != want {
								t.Fatalf("client %v port %d went to %v; with affinity every connection of the client goes to %v", src, sport, be, want)
							}
							if c.encap == EncapGUE {
								if wantPort := TunnelPort(hash, sport, true); port != wantPort {
									t.Fatalf("client %v port %d: GUE source port %#x, TunnelPort predicts %#x", src, sport, port, wantPort)
								}
								ports[port] = true
							}
						}
						if c.encap == EncapGUE && len(ports) < len(sports)/2 {
							t.Errorf("client %v: %d connections had %d GUE source ports; each should have its own", src, len(sports), len(ports))
						}
						clients[want] = true
						if c.key.Proto == ProtoTCP {
							be, _ := forwardTo(t, d, f, icmpAbout(f.MAC, 3, 4, fxVIP, src, 80, sports[3]))
							if be != want {
								t.Errorf("ICMP error about a connection of %v went to %v, the client's backend is %v", src, be, want)
							}
						}
					}
					if len(clients) != 2 {
						t.Errorf("16 clients reached %d backends, want both: affinity keeps a client on one backend, not every client", len(clients))
					}
				})
			}
		})
	}
}

// TestLBClientIPAffinityFlag: the flag is part of the service's index
// slot: Installed reads it back, and upserting the same table with the
// flag changed changes where a client's connections go at once.
func TestLBClientIPAffinityFlag(t *testing.T) {
	d, f := newFixtureLB(t)
	key := ServiceKey{fxVIP, 80, ProtoTCP}
	backendsOf := func() map[netip.Addr]bool {
		got := map[netip.Addr]bool{}
		for i := range 16 {
			p := tcpTo(fxVIP, 80)
			p.Sport = uint16(2000 + 3001*i)
			be, _ := forwardTo(t, d, f, p.Frame(f.MAC))
			got[be] = true
		}
		return got
	}
	for _, clientIP := range []bool{true, false, true} {
		affinityService(t, d, 0, key, EncapIPIP, clientIP)
		svcs, err := servicesOf(d)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(svcs, func(s Service) bool { return s.Key == key })
		if i < 0 || svcs[i].ClientIP != clientIP {
			t.Fatalf("Installed lists %+v, want ClientIP %v", svcs, clientIP)
		}
		if got, want := len(backendsOf()), map[bool]int{true: 1, false: 2}[clientIP]; got != want {
			t.Errorf("affinity %v: one client's 16 connections reached %d backends, want %d", clientIP, got, want)
		}
	}
}

// TestLBClientIPAffinityInstancesAgree: two independently loaded
// programs with the same backends, learned in opposite orders under
// other IDs, send every connection of a client to the same backend, so
// ECMP may hand each connection to either node.
func TestLBClientIPAffinityInstancesAgree(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	var addrs, reversed []netip.Addr
	for i := range 8 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, 3, byte(10 + i)}))
	}
	for i := range addrs {
		reversed = append(reversed, addrs[len(addrs)-1-i])
	}
	a := instanceWith(t, addrs, 0, true)
	b := instanceWith(t, reversed, 100, true)
	clients := map[netip.Addr]bool{}
	for n := range 64 {
		src := netip.AddrFrom4([4]byte{10, byte(n / 16), 2, byte(2 + n)})
		var first netip.Addr
		for i := range 8 {
			p := tcpTo(fxVIP, 80)
			p.Src, p.Sport = src, uint16(1024+7919*i)
			inst := a
			if i%2 == 1 {
				inst = b
			}
			be, _ := forwardTo(t, inst, f, p.Frame(f.MAC))
			if i == 0 {
				first = be
			} else if be != first {
				t.Fatalf("client %v: connection %d (port %d) through instance %d went to %v, connection 0 through instance A to %v", src, i, p.Sport, i%2, be, first)
			}
		}
		clients[first] = true
	}
	if len(clients) < 4 {
		t.Errorf("64 clients reached %d of 8 backends: affinity should not gather clients", len(clients))
	}
}

// TestLBStatefulClientIPAffinity: a stateful service with client-IP
// affinity picks a client's backend without the source port too (its
// path hashes apart from the stateless one), and still keeps an entry
// per connection.
func TestLBStatefulClientIPAffinity(t *testing.T) {
	s := newStatefulFixture(t, ServiceKey{fxVIP, 8080, ProtoTCP})
	s.svc.ClientIP = true
	s.svc.Table = make([]uint32, fxTableSize)
	for i := range s.svc.Table {
		s.svc.Table[i] = 20 + uint32(i%2)
	}
	if err := s.d.UpsertService(s.svc); err != nil {
		t.Fatal(err)
	}
	clients := map[netip.Addr]bool{}
	for n := range 8 {
		src := netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + n)})
		want := s.addrs[s.svc.Table[Slot(FlowHash(src, fxVIP, 0, 8080, 6), fxTableSize)]]
		before := s.entries(t)
		for i := range 8 {
			p := tcpTo(fxVIP, 8080)
			p.Src, p.Sport, p.TCPFlags = src, uint16(3000+1009*i), tcpSYN
			if got, _ := s.send(t, p.Frame(s.f.MAC)); got != want {
				t.Fatalf("client %v, SYN from port %d: to %v, want the client's backend %v", src, p.Sport, got, want)
			}
		}
		if got := s.entries(t) - before; got != 8 {
			t.Errorf("client %v: 8 connections made %d flow entries, want 8", src, got)
		}
		clients[want] = true
	}
	if len(clients) != 2 {
		t.Errorf("8 clients reached %d backends, want both", len(clients))
	}
}
