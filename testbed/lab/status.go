package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Status is what `xlb lab status` shows.
type Status struct {
	Prefix string `json:"prefix"`
	// Up is true when the lab's recorded state and all its namespaces
	// exist. Broken is true when only part of a lab exists, such as the
	// remains of a crash: Down removes them.
	Up         bool              `json:"up"`
	Broken     bool              `json:"broken"`
	StateDir   string            `json:"stateDir"`
	PinDir     string            `json:"pinDir"`
	Namespaces []NamespaceStatus `json:"namespaces"`
	// Routes are the router's routes within the VIP prefix.
	Routes    []Route         `json:"routes"`
	Processes []ProcessStatus `json:"processes"`

	// Router is the kind of upstream router (Spec.Router), Reflector
	// whether a route reflector sits between it and the nodes. BGP
	// says how nodes peer; nil for the static router.
	Router    string `json:"router,omitempty"`
	Reflector bool   `json:"reflector,omitempty"`
	BGP       *BGP   `json:"bgp,omitempty"`
	// Sessions are the BGP sessions of the router and the reflector;
	// SessionsError says why some could not be read.
	Sessions      []Session `json:"sessions,omitempty"`
	SessionsError string    `json:"sessionsError,omitempty"`
}

// Session is one BGP session of the lab's router or route reflector.
type Session struct {
	Speaker  string     `json:"speaker"` // "router" or "rr"
	Peer     netip.Addr `json:"peer"`
	ASN      uint32     `json:"asn,omitempty"`
	State    string     `json:"state"`              // established, active, ...
	Prefixes *int       `json:"prefixes,omitempty"` // received from the peer, where the speaker tells
}

// NamespaceStatus lists a namespace's interfaces.
type NamespaceStatus struct {
	Name       string            `json:"name"`
	Interfaces []InterfaceStatus `json:"interfaces"`
}

// InterfaceStatus is one interface and its IPv4 and global IPv6
// addresses.
type InterfaceStatus struct {
	Name   string         `json:"name"`
	State  string         `json:"state"`
	MTU    int            `json:"mtu"`
	Master string         `json:"master,omitempty"`
	XDP    bool           `json:"xdp"` // an XDP program is attached
	Addrs  []netip.Prefix `json:"addrs"`
}

// ProcessStatus is one process that StartProcess started.
type ProcessStatus struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	PID       int      `json:"pid"`
	Alive     bool     `json:"alive"`
	Argv      []string `json:"argv"`
	Log       string   `json:"log"`
}

// ReadStatus inspects lab prefix. A lab that is down yields a Status with
// Up false and nothing in it, not an error.
func ReadStatus(prefix string) (Status, error) {
	if err := checkPrefix(prefix); err != nil {
		return Status{}, err
	}
	st := Status{Prefix: prefix, StateDir: StateDir(prefix), PinDir: PinDir(prefix)}
	namespaces, err := labNamespaces(prefix)
	if err != nil {
		return st, err
	}
	p, err := Load(prefix)
	switch {
	case err == nil:
		st.Up = true
		for _, ns := range p.Namespaces() {
			st.Up = st.Up && slices.Contains(namespaces, ns)
		}
	case !errors.Is(err, ErrNotUp):
		return st, err
	}
	if !st.Up {
		_, stateErr := os.Stat(st.StateDir)
		_, pinErr := os.Stat(st.PinDir)
		st.Broken = len(namespaces) > 0 || stateErr == nil || pinErr == nil
	}
	ctx := context.Background()
	for _, ns := range namespaces {
		ifaces, err := interfaces(ctx, ns)
		if err != nil {
			return st, err
		}
		st.Namespaces = append(st.Namespaces, NamespaceStatus{Name: ns, Interfaces: ifaces})
	}
	if st.Up {
		if st.Routes, err = vipRoutes(ctx, p.Router, p.VIPPrefix); err != nil {
			return st, err
		}
		if p.VIPPrefix6.IsValid() {
			routes6, err := vipRoutes(ctx, p.Router, p.VIPPrefix6)
			if err != nil {
				return st, err
			}
			st.Routes = append(st.Routes, routes6...)
		}
		st.Router, st.Reflector, st.BGP = p.Spec.Router, p.Spec.Reflector, p.BGP
		// A router that does not answer is part of the status, not a
		// failure to read it.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st.Sessions, err = sessions(sctx, p)
		cancel()
		if err != nil {
			st.SessionsError = err.Error()
		}
	}
	recs, err := records(prefix)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	for _, r := range recs {
		st.Processes = append(st.Processes, ProcessStatus{
			Name: r.Name, Namespace: r.Namespace, PID: r.PID, Alive: ours(r), Argv: r.Argv, Log: LogFile(prefix, r.Name),
		})
	}
	return st, nil
}

// interfaces lists a namespace's interfaces, leaving out a loopback that
// holds nothing but 127.0.0.1.
func interfaces(ctx context.Context, ns string) ([]InterfaceStatus, error) {
	out, err := ip(ctx, "-j", "-n", ns, "addr", "show")
	if err != nil {
		return nil, err
	}
	return parseInterfaces(out)
}

func parseInterfaces(b []byte) ([]InterfaceStatus, error) {
	var raw []struct {
		Name     string          `json:"ifname"`
		State    string          `json:"operstate"`
		MTU      int             `json:"mtu"`
		Master   string          `json:"master"`
		XDP      json.RawMessage `json:"xdp"`
		AddrInfo []struct {
			Family string `json:"family"`
			Local  string `json:"local"`
			Len    int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("interfaces from ip: %w", err)
	}
	var ifaces []InterfaceStatus
	for _, r := range raw {
		i := InterfaceStatus{Name: r.Name, State: r.State, MTU: r.MTU, Master: r.Master, XDP: len(r.XDP) > 0, Addrs: []netip.Prefix{}}
		for _, a := range r.AddrInfo {
			// IPv6 link-local addresses and ::1 are on every
			// interface, or loopback, and say nothing about the lab.
			if a.Family != "inet" && (a.Family != "inet6" || strings.HasPrefix(a.Local, "fe80:") || a.Local == "::1") {
				continue
			}
			addr, err := netip.ParseAddr(a.Local)
			if err != nil {
				return nil, fmt.Errorf("interface %s: address %q: %w", r.Name, a.Local, err)
			}
			i.Addrs = append(i.Addrs, netip.PrefixFrom(addr, a.Len))
		}
		if r.Name == "lo" && len(i.Addrs) <= 1 && !i.XDP {
			continue
		}
		ifaces = append(ifaces, i)
	}
	return ifaces, nil
}

// WriteText writes st for people to read.
func (st Status) WriteText(w io.Writer) error {
	if !st.Up && !st.Broken {
		_, err := fmt.Fprintf(w, "lab %q is down (start it with `xlb lab up --prefix %s`)\n", st.Prefix, st.Prefix)
		return err
	}
	state := "up"
	if st.Broken {
		state = "BROKEN: only part of the lab exists (a crash?); remove it with `xlb lab down --prefix " + st.Prefix + "`"
	}
	fmt.Fprintf(w, "lab %q: %s\n  state %s\n  pins  %s\n\n", st.Prefix, state, st.StateDir, st.PinDir)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tINTERFACE\tSTATE\tMTU\tADDRESSES\tXDP")
	for _, ns := range st.Namespaces {
		name := ns.Name
		for _, i := range ns.Interfaces {
			addrs := "-"
			if len(i.Addrs) > 0 {
				var s []string
				for _, a := range i.Addrs {
					s = append(s, a.String())
				}
				addrs = strings.Join(s, " ")
			}
			if i.Master != "" {
				addrs = "port of " + i.Master
			}
			xdp := ""
			if i.XDP {
				xdp = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", name, i.Name, i.State, i.MTU, addrs, xdp)
			name = ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if st.Router != "" {
		if err := st.writeRouter(w); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nroutes to the VIPs at the router:")
	if len(st.Routes) == 0 {
		fmt.Fprintln(w, "  none: the VIPs are unreachable")
	}
	for _, r := range st.Routes {
		var hops []string
		for _, h := range r.Nexthops {
			hops = append(hops, h.String())
		}
		proto := ""
		if r.Protocol != "" {
			proto = " (" + r.Protocol + ")"
		}
		fmt.Fprintf(w, "  %s%s via %s\n", r.Dst, proto, strings.Join(hops, ", "))
	}

	fmt.Fprintln(w, "\nprocesses:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range st.Processes {
		state := "running"
		if !p.Alive {
			state = "EXITED (see its log)"
		}
		fmt.Fprintf(tw, "  %s\t%s\tpid %d\t%s\t%s\n", p.Name, p.Namespace, p.PID, state, p.Log)
	}
	if len(st.Processes) == 0 {
		fmt.Fprintln(tw, "  none")
	}
	return tw.Flush()
}

// writeRouter describes the upstream router and its BGP sessions.
func (st Status) writeRouter(w io.Writer) error {
	fmt.Fprintf(w, "\nupstream router: %s", st.Router)
	if st.Reflector {
		fmt.Fprint(w, ", behind a gobgpd route reflector")
	}
	fmt.Fprintln(w)
	if b := st.BGP; b != nil {
		fmt.Fprintf(w, "  xlb nodes announce their VIPs as AS %d to %s (AS %d), hold time %s", b.NodeASN, b.PeerAddr, b.PeerASN, b.HoldTime)
		if b.BFD != nil {
			fmt.Fprintf(w, ", BFD %s x %d", b.BFD.MinRx, b.BFD.Multiplier)
		}
		fmt.Fprintln(w)
	}
	if st.Router == RouterStatic {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range st.Sessions {
		prefixes := ""
		if s.Prefixes != nil {
			prefixes = fmt.Sprintf("%d prefixes", *s.Prefixes)
		}
		fmt.Fprintf(tw, "  %s\t%s\tAS %d\t%s\t%s\n", s.Speaker, s.Peer, s.ASN, s.State, prefixes)
	}
	if len(st.Sessions) == 0 {
		fmt.Fprintln(tw, "  no BGP sessions yet")
	}
	if st.SessionsError != "" {
		fmt.Fprintf(tw, "  sessions unreadable: %s\n", st.SessionsError)
	}
	return tw.Flush()
}
