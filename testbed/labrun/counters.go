package labrun

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
)

// LinkStats are an interface's packet counters, as the kernel keeps them.
// On a veth, frames an XDP program sends back out with XDP_TX count as
// transmitted.
type LinkStats struct {
	RxPackets, TxPackets uint64
	RxBytes, TxBytes     uint64
}

// ReadLink reads the counters of interface ifname in namespace ns. It
// asks over netlink from inside the namespace: /sys/class/net would show
// the interfaces of the namespace /sys was mounted in, not of ns.
func ReadLink(ns, ifname string) (LinkStats, error) {
	var st LinkStats
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		s := l.Attrs().Statistics
		if s == nil {
			return fmt.Errorf("the kernel reported no statistics")
		}
		st = LinkStats{RxPackets: s.RxPackets, TxPackets: s.TxPackets, RxBytes: s.RxBytes, TxBytes: s.TxBytes}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("counters of %s in %s: %w", ifname, ns, err)
	}
	return st, nil
}

// IPStats are a namespace's TCP and UDP counters from /proc/net/snmp.
type IPStats struct {
	TCPOutSegs      uint64 // segments sent, retransmissions excluded
	TCPRetransSegs  uint64
	TCPInSegs       uint64
	UDPOutDatagrams uint64
	UDPInDatagrams  uint64
}

// ReadIPStats reads namespace ns's TCP and UDP counters. The file is read
// through /proc/thread-self: /proc/net follows the namespace of the
// process's main thread, not of the thread that joined ns.
func ReadIPStats(ns string) (IPStats, error) {
	var st IPStats
	err := netns.Do(ns, func() error {
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		defer f.Close()
		st, err = parseSNMP(f)
		return err
	})
	if err != nil {
		return st, fmt.Errorf("TCP/UDP counters of %s: %w", ns, err)
	}
	return st, nil
}

// parseSNMP reads the Tcp and Udp counters of /proc/net/snmp.
func parseSNMP(r io.Reader) (IPStats, error) {
	var st IPStats
	err := ParseSNMP(r, map[string]*uint64{
		"Tcp.OutSegs": &st.TCPOutSegs, "Tcp.RetransSegs": &st.TCPRetransSegs, "Tcp.InSegs": &st.TCPInSegs,
		"Udp.OutDatagrams": &st.UDPOutDatagrams, "Udp.InDatagrams": &st.UDPInDatagrams,
	})
	return st, err
}

// ParseSNMP reads counters of /proc/net/snmp (or /proc/net/netstat, of
// the same format) into want, keyed "Proto.Name" (Udp.InDatagrams): per
// protocol a line of names follows a line of values, both prefixed with
// "Proto:". Only unsigned counters can
// be wanted (MaxConn, printed signed, cannot), and every one wanted must
// be there.
func ParseSNMP(r io.Reader, want map[string]*uint64) error {
	names := map[string][]string{}
	found := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		proto, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		header, seen := names[proto]
		if !seen {
			names[proto] = fields
			continue
		}
		delete(names, proto) // a later pair of lines starts anew
		if len(header) != len(fields) {
			return fmt.Errorf("snmp: %s: %d names but %d values", proto, len(header), len(fields))
		}
		for i, name := range header {
			p, ok := want[proto+"."+name]
			if !ok {
				continue
			}
			v, err := strconv.ParseUint(fields[i], 10, 64)
			if err != nil {
				return fmt.Errorf("snmp: %s.%s: %w", proto, name, err)
			}
			*p = v
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("snmp: %w", err)
	}
	if found != len(want) {
		return fmt.Errorf("snmp: found %d of the %d counters wanted", found, len(want))
	}
	return nil
}

// NodeSample is what one xlb node has counted.
type NodeSample struct {
	Name string
	// Link counts the node's interface (eth0): everything that reached
	// the node, and everything it sent.
	Link LinkStats
	// Forwarded is the number of packets the node's XDP program
	// encapsulated towards a backend, over all services.
	Forwarded uint64
	// Services and Backends split Forwarded by service name and by
	// backend address (summed over services).
	Services map[string]uint64
	Backends map[netip.Addr]uint64
	// Reasons counts the packets the XDP program passed to the kernel or
	// dropped, by reason (wire.ReasonNames).
	Reasons map[string]uint64
}

// HostSample is what a client has counted.
type HostSample struct {
	Name string
	Link LinkStats
	IP   IPStats
}

// Snapshot holds the counters of every node and client of a lab at one
// moment; Since turns two snapshots into what happened in between.
type Snapshot struct {
	Nodes   []NodeSample
	Clients []HostSample
}

// TakeSnapshot reads the counters of every node's agent and interface and
// of every client's interface and TCP/IP stack.
func TakeSnapshot(p lab.Plan) (Snapshot, error) {
	var s Snapshot
	for _, n := range p.Nodes {
		st, err := api.GetStatus(Socket(p, n))
		if err != nil {
			return s, fmt.Errorf("%s: %w", n.Name, err)
		}
		link, err := ReadLink(n.Namespace, n.Interface)
		if err != nil {
			return s, err
		}
		s.Nodes = append(s.Nodes, nodeSample(n.Name, st, link))
	}
	for _, c := range p.Clients {
		link, err := ReadLink(c.Namespace, c.Interface)
		if err != nil {
			return s, err
		}
		ip, err := ReadIPStats(c.Namespace)
		if err != nil {
			return s, err
		}
		s.Clients = append(s.Clients, HostSample{Name: c.Name, Link: link, IP: ip})
	}
	return s, nil
}

func nodeSample(name string, st *api.Status, link LinkStats) NodeSample {
	ns := NodeSample{Name: name, Link: link, Services: map[string]uint64{}, Backends: map[netip.Addr]uint64{}, Reasons: map[string]uint64{}}
	maps.Copy(ns.Reasons, st.Reasons)
	for _, svc := range st.Services {
		ns.Services[svc.Name] = svc.Counters.Packets
		ns.Forwarded += svc.Counters.Packets
		for _, b := range svc.Backends {
			ns.Backends[b.Address] += b.Counters.Packets
		}
	}
	return ns
}

// Since returns the counters' growth from old to s. Both must come from
// the same lab. A counter that went down (its service or backend was
// removed and added again) counts from zero.
func (s Snapshot) Since(old Snapshot) Snapshot {
	var d Snapshot
	for i, n := range s.Nodes {
		var o NodeSample
		if i < len(old.Nodes) {
			o = old.Nodes[i]
		}
		dn := NodeSample{
			Name:      n.Name,
			Link:      n.Link.since(o.Link),
			Forwarded: delta(n.Forwarded, o.Forwarded),
			Services:  map[string]uint64{},
			Backends:  map[netip.Addr]uint64{},
			Reasons:   map[string]uint64{},
		}
		for k, v := range n.Services {
			dn.Services[k] = delta(v, o.Services[k])
		}
		for k, v := range n.Backends {
			dn.Backends[k] = delta(v, o.Backends[k])
		}
		for k, v := range n.Reasons {
			dn.Reasons[k] = delta(v, o.Reasons[k])
		}
		d.Nodes = append(d.Nodes, dn)
	}
	for i, c := range s.Clients {
		var o HostSample
		if i < len(old.Clients) {
			o = old.Clients[i]
		}
		d.Clients = append(d.Clients, HostSample{
			Name: c.Name,
			Link: c.Link.since(o.Link),
			IP: IPStats{
				TCPOutSegs:      delta(c.IP.TCPOutSegs, o.IP.TCPOutSegs),
				TCPRetransSegs:  delta(c.IP.TCPRetransSegs, o.IP.TCPRetransSegs),
				TCPInSegs:       delta(c.IP.TCPInSegs, o.IP.TCPInSegs),
				UDPOutDatagrams: delta(c.IP.UDPOutDatagrams, o.IP.UDPOutDatagrams),
				UDPInDatagrams:  delta(c.IP.UDPInDatagrams, o.IP.UDPInDatagrams),
			},
		})
	}
	return d
}

func (l LinkStats) since(o LinkStats) LinkStats {
	return LinkStats{
		RxPackets: delta(l.RxPackets, o.RxPackets),
		TxPackets: delta(l.TxPackets, o.TxPackets),
		RxBytes:   delta(l.RxBytes, o.RxBytes),
		TxBytes:   delta(l.TxBytes, o.TxBytes),
	}
}

func delta(now, before uint64) uint64 {
	if now < before {
		return now
	}
	return now - before
}

// Drops reads, for every interface of every namespace of lab p (the
// router's ports and bridges included), the packets the kernel dropped
// on it, received and sent, keyed "namespace/interface". A veth whose
// peer runs XDP drops what overflows the peer's ring as sent-and-dropped.
func Drops(p lab.Plan) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := EachLink(p, func(ns string, l netlink.Link) {
		if s := l.Attrs().Statistics; s != nil {
			out[ns+"/"+l.Attrs().Name] = s.RxDropped + s.TxDropped + s.RxMissedErrors + s.RxFifoErrors + s.TxFifoErrors
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachLink calls f for every interface of every namespace of lab p (the
// router's ports and bridges included), with its statistics as netlink
// reports them.
func EachLink(p lab.Plan, f func(ns string, l netlink.Link)) error {
	for _, ns := range p.Namespaces() {
		err := netns.Do(ns, func() error {
			links, err := netlink.LinkList()
			if err != nil {
				return err
			}
			for _, l := range links {
				f(ns, l)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("interfaces of %s: %w", ns, err)
		}
	}
	return nil
}
