package lbharness

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// A NAT connection's life through the LB program, packet by packet, as a
// client that opens a connection per request meets it: each packet one
// test run of its own, so that the caches are as cold as between a
// node's packets, and a client port comes back (a new SYN on the closing
// session of its last connection) as a busy client's ports do.

// NATConnStep is one packet of a NAT connection's life: its direction
// and TCP flags.
type NATConnStep struct {
	Name    string
	Reply   bool // backend to client
	Flags   byte
	Session string // what it does to the session
}

// NATConnSteps is a connection whose server closes first (an HTTP
// server answering one request per connection): the client's SYN, the
// SYN-ACK, the ACK that establishes the session, the request, the
// response, the server's FIN, the client's ACK and FIN, the last ACK.
var NATConnSteps = []NATConnStep{
	{"syn", false, 0x02, "meets the closing session of the port's last connection, to the backend the table still gives it: opens it again in place (a port's first SYN, syn_first, claims a port and writes both embryonic entries)"},
	{"syn_ack", true, 0x12, "the reply marks the session answered"},
	{"ack", false, 0x10, "establishes the session (a port's first: moved to the established tables)"},
	{"request", false, 0x18, "an established packet, client to backend"},
	{"response", true, 0x18, "an established packet, backend to client"},
	{"fin_backend", true, 0x11, "the backend's FIN closes the session"},
	{"ack_client", false, 0x10, "the client's ACK on the closing session"},
	{"fin_client", false, 0x11, "the client's FIN"},
	{"ack_last", true, 0x10, "the backend's last ACK"},
}

// NATConnResult is one step's time over the measured connections (each
// a port's next connection: its SYN meets the closing session of the
// last), the whole connection's (Step "connection"), and the SYN of each
// port's first connection, in the unmeasured pass (Step "syn_first").
type NATConnResult struct {
	Step     string  `json:"step"`
	MedianNs float64 `json:"median_ns"`
	P90Ns    float64 `json:"p90_ns"`
	MeanNs   float64 `json:"mean_ns"`
}

// NATConnConfig says how many connections to measure over how many
// client ports, beside how many established sessions of other clients.
type NATConnConfig struct {
	Backends int
	Sessions int // other clients' established sessions in the table
	Ports    int // client ports, used in turn
	Conns    int // connections measured, after one unmeasured pass over the ports
}

// natConnClient is the client of the connection-life case: one address
// apart from the full-table clients'.
var natConnClient = netip.MustParseAddr("10.0.2.200")

// RunNATConns measures cfg.Conns connections' lives through the LB
// program (bench_lb), every packet checked for its verdict. It returns
// the steps' times, net of the empty harness's (wrap_only run alike),
// and the whole connection's as the sum of its steps' net times.
func RunNATConns(cfg NATConnConfig) ([]NATConnResult, error) {
	if cfg.Ports < 1 || cfg.Ports > 40000 || cfg.Conns < 1 {
		return nil, fmt.Errorf("NAT connections: %d ports (1 to 40000), %d connections (at least 1)", cfg.Ports, cfg.Conns)
	}
	env, err := openBenchEnv("xlb-bench-natconn", cfg.Backends)
	if err != nil {
		return nil, err
	}
	defer env.close()
	if cfg.Sessions > 0 {
		if _, err := env.natFull(cfg.Sessions); err != nil {
			return nil, err
		}
	}
	vip := netip.AddrPortFrom(env.vip, natPort)
	times := make([][]float64, len(NATConnSteps)+1)
	err = netns.Do(env.ns, func() error {
		idx, err := benchThread()
		if err != nil {
			return err
		}
		var base, first []float64
		for i := 0; i < cfg.Ports+cfg.Conns; i++ {
			client := netip.AddrPortFrom(natConnClient, uint16(20000+i%cfg.Ports))
			measured := i >= cfg.Ports
			var backend, source netip.AddrPort
			var rk wire.SessionKey
			total := 0.0
			for si, s := range NATConnSteps {
				var f []byte
				if s.Reply {
					f = benchSegment(backend, source, s.Flags)
				} else {
					f = benchSegment(client, vip, s.Flags)
				}
				v, ns, _, err := testRunXDP(env.objs.BenchLb.FD(), f, idx, 1)
				if err != nil || v != xdpVerdictTX {
					return fmt.Errorf("NAT connection %d (%s), %s: verdict %s, %v", i, client, s.Name, xdpVerdictName(v), err)
				}
				fk := wire.SessionKey{Src: wire.AddrOf(client.Addr()), Dst: wire.AddrOf(env.vip), Sport: wire.Port(client.Port()), Dport: wire.Port(natPort), Proto: 6}
				switch s.Name {
				case "syn":
					// A port's first connection opens an embryonic
					// session; its next ones reopen the closing
					// session in place, in the established tables.
					if measured {
						var f wire.SessionFwd
						if err := env.objs.NatFwd.Lookup(&fk, &f); err != nil || f.State != wire.SessionSyn {
							return fmt.Errorf("NAT connection %d (%s): its SYN did not reopen the port's closing session (%+v, %v)", i, client, f, err)
						}
						rk = f.Rk
					} else if err := env.objs.NatFwdSyn.Lookup(&fk, &rk); err != nil {
						return fmt.Errorf("NAT connection %d (%s): no embryonic session after its SYN: %w", i, client, err)
					}
					backend = netip.AddrPortFrom(rk.Src.IP(), wire.PortFrom(rk.Sport))
					source = netip.AddrPortFrom(rk.Dst.IP(), wire.PortFrom(rk.Dport))
				case "ack":
					var f wire.SessionFwd
					if err := env.objs.NatFwd.Lookup(&fk, &f); err != nil || f.Rk != rk || f.State != wire.SessionEstablished {
						return fmt.Errorf("NAT connection %d (%s): not established by its ACK (%+v, %v)", i, client, f, err)
					}
				}
				if measured {
					times[si] = append(times[si], float64(ns))
					total += float64(ns)
				} else if s.Name == "syn" {
					first = append(first, float64(ns))
				}
			}
			// The harness alone, as often as the steps.
			v, ns, _, err := testRunXDP(env.objs.WrapOnly.FD(), benchFramePort(env.vip, natPort), idx, 1)
			if err != nil || v != xdpVerdictTX {
				return fmt.Errorf("wrap_only: verdict %s, %v", xdpVerdictName(v), err)
			}
			if measured {
				base = append(base, float64(ns))
				times[len(NATConnSteps)] = append(times[len(NATConnSteps)], total)
			}
		}
		b := median(base)
		for si := range NATConnSteps {
			for j := range times[si] {
				times[si][j] -= b
			}
		}
		for j := range times[len(NATConnSteps)] {
			times[len(NATConnSteps)][j] -= b * float64(len(NATConnSteps))
		}
		for j := range first {
			first[j] -= b
		}
		times = append(times, first)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Every connection opened a session: the one-session case's, the full
	// table's and these; the embryonic ones were promoted, the reopened
	// ones (the measured connections) established in place.
	st, err := env.d.NATStatCounters()
	if err != nil {
		return nil, err
	}
	created, promoted := uint64(1+cfg.Sessions+cfg.Ports+cfg.Conns), uint64(1+cfg.Sessions+cfg.Ports)
	if st["created"] != created || st["promoted"] != promoted {
		return nil, fmt.Errorf("NAT counters %v after %d connections beside %d sessions: want %d created, %d promoted", st, cfg.Ports+cfg.Conns, cfg.Sessions+1, created, promoted)
	}
	out := make([]NATConnResult, 0, len(times))
	for si, t := range times {
		name := "connection"
		switch {
		case si < len(NATConnSteps):
			name = NATConnSteps[si].Name
		case si == len(NATConnSteps)+1:
			name = "syn_first"
		}
		sorted := slices.Clone(t)
		slices.Sort(sorted)
		sum := 0.0
		for _, x := range t {
			sum += x
		}
		out = append(out, NATConnResult{Step: name, MedianNs: median(t), P90Ns: sorted[len(sorted)*9/10], MeanNs: sum / float64(len(t))})
	}
	return out, nil
}
