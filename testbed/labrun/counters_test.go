package labrun

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
)

// snmpSample is /proc/net/snmp of this kernel, trimmed to a few sections.
const snmpSample = `Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 7033
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 125 66 8 0 0 6728 5208 1 0 14 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 176 64 0 241 0 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 9 9 9 9 9 9 9 9 9
`

func TestParseSNMP(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     IPStats
		err      string
	}{
		{"kernel sample", snmpSample, IPStats{TCPOutSegs: 5208, TCPRetransSegs: 1, TCPInSegs: 6728, UDPOutDatagrams: 241, UDPInDatagrams: 176}, ""},
		{"no Udp", strings.Join(strings.Split(snmpSample, "\n")[:4], "\n"), IPStats{}, "found 3 of the 5"},
		{"short values", "Tcp: InSegs OutSegs RetransSegs\nTcp: 1 2\n", IPStats{}, "3 names but 2 values"},
		{"not a number", "Tcp: InSegs OutSegs RetransSegs\nTcp: 1 x 3\n", IPStats{}, "Tcp.OutSegs"},
		{"empty", "", IPStats{}, "found 0 of the 5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseSNMP(strings.NewReader(c.in))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestNodeSample(t *testing.T) {
	be1, be2 := netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.3.3")
	st := &api.Status{
		Services: []api.Service{
			{Name: "web", Counters: api.Counters{Packets: 10}, Backends: []api.Backend{
				{Address: be1, Counters: api.Counters{Packets: 4}}, {Address: be2, Counters: api.Counters{Packets: 6}}}},
			{Name: "echo", Counters: api.Counters{Packets: 3}, Backends: []api.Backend{
				{Address: be1, Counters: api.Counters{Packets: 3}}}},
		},
		Reasons: map[string]uint64{"pass_not_ipv4": 2},
	}
	n := nodeSample("node1", st, LinkStats{RxPackets: 15})
	if n.Forwarded != 13 || n.Services["web"] != 10 || n.Services["echo"] != 3 ||
		n.Backends[be1] != 7 || n.Backends[be2] != 6 || n.Reasons["pass_not_ipv4"] != 2 || n.Link.RxPackets != 15 {
		t.Errorf("%+v", n)
	}
	// The sample must not alias the status's map.
	st.Reasons["pass_not_ipv4"] = 99
	if n.Reasons["pass_not_ipv4"] != 2 {
		t.Error("the sample shares the status's reasons map")
	}
}

func TestSince(t *testing.T) {
	be := netip.MustParseAddr("10.0.3.2")
	old := Snapshot{
		Nodes: []NodeSample{{Name: "node1", Link: LinkStats{RxPackets: 100, TxPackets: 90, RxBytes: 1000, TxBytes: 900}, Forwarded: 80,
			Services: map[string]uint64{"web": 80}, Backends: map[netip.Addr]uint64{be: 80}, Reasons: map[string]uint64{"pass_not_ipv4": 5}}},
		Clients: []HostSample{{Name: "client1", Link: LinkStats{TxPackets: 50}, IP: IPStats{TCPOutSegs: 40, TCPInSegs: 30}}},
	}
	now := Snapshot{
		Nodes: []NodeSample{{Name: "node1", Link: LinkStats{RxPackets: 130, TxPackets: 115, RxBytes: 1300, TxBytes: 1150}, Forwarded: 105,
			// The service was removed and added again: its counter
			// restarted at zero and is now below the old value.
			Services: map[string]uint64{"web": 25, "echo": 7}, Backends: map[netip.Addr]uint64{be: 100}, Reasons: map[string]uint64{"pass_not_ipv4": 6}}},
		Clients: []HostSample{{Name: "client1", Link: LinkStats{TxPackets: 80}, IP: IPStats{TCPOutSegs: 65, TCPInSegs: 52}}},
	}
	d := now.Since(old)
	n := d.Nodes[0]
	if n.Link != (LinkStats{RxPackets: 30, TxPackets: 25, RxBytes: 300, TxBytes: 250}) || n.Forwarded != 25 {
		t.Errorf("node link %+v forwarded %d", n.Link, n.Forwarded)
	}
	if n.Services["web"] != 25 || n.Services["echo"] != 7 || n.Backends[be] != 20 || n.Reasons["pass_not_ipv4"] != 1 {
		t.Errorf("node counters %+v", n)
	}
	c := d.Clients[0]
	if c.Link.TxPackets != 30 || c.IP.TCPOutSegs != 25 || c.IP.TCPInSegs != 22 {
		t.Errorf("client %+v", c)
	}
	// The old snapshot is untouched.
	if old.Nodes[0].Services["web"] != 80 {
		t.Error("Since changed its argument")
	}
}
