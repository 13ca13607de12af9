package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

func runStatus(args []string) error {
	fset := flag.NewFlagSet("xlb status", flag.ContinueOnError)
	asJSON := fset.Bool("json", false, "print the status as JSON")
	socket := fset.String("socket", "", "the agent's API `socket` (default "+config.DefaultSocket+")")
	cfgPath := fset.String("config", "", "take the socket from the agent's configuration `file`")
	sessions := fset.String("sessions", "", "list a sample of the NAT sessions of the services at `VIP[:PORT[/PROTOCOL]]`")
	sample := fset.Int("max", api.DefaultSessionSample, "with --sessions: list at most `N` sessions of each service")
	if err := fset.Parse(args); err != nil {
		return err
	}
	maxSet := false
	fset.Visit(func(f *flag.Flag) { maxSet = maxSet || f.Name == "max" })
	const usage = "usage: xlb status [--json] [--socket PATH | --config FILE] [--sessions VIP[:PORT[/PROTOCOL]] [--max N]]"
	if fset.NArg() > 0 || (*socket != "" && *cfgPath != "") {
		fmt.Fprintln(os.Stderr, usage)
		return errUsage
	}
	var q *api.SessionQuery
	switch {
	case *sessions != "":
		sq, err := api.ParseSessionQuery(*sessions)
		if err != nil {
			fmt.Fprintln(os.Stderr, "xlb status: --sessions", err)
			return errUsage
		}
		if *sample < 1 || *sample > api.MaxSessionSample {
			fmt.Fprintf(os.Stderr, "xlb status: --max %d: give 1..%d\n", *sample, api.MaxSessionSample)
			return errUsage
		}
		sq.Max = *sample
		q = &sq
	case maxSet:
		fmt.Fprintln(os.Stderr, "xlb status: --max applies to --sessions only")
		fmt.Fprintln(os.Stderr, usage)
		return errUsage
	}
	path := *socket
	switch {
	case *cfgPath != "":
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		path = cfg.API.Socket
	case path == "":
		path = config.DefaultSocket
	}

	if q != nil {
		return runSessions(path, *q, *asJSON)
	}
	st, err := api.GetStatus(path)
	switch {
	case errors.Is(err, api.ErrNotRunning):
		return fmt.Errorf("%w: start it with `xlb agent --config FILE`, or point to its socket with --socket PATH or --config FILE", err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: run as root or as a member of the socket's group", err)
	case err != nil:
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printStatus(os.Stdout, st, time.Now())
}

// printStatus writes st as text; now is the time the "ago"s count from.
func printStatus(w io.Writer, st *api.Status, now time.Time) error {
	n := st.Node
	var addrs []string
	for _, a := range []netip.Addr{n.Address, n.Address6} {
		if a.IsValid() {
			addrs = append(addrs, a.String())
		}
	}
	fmt.Fprintf(w, "Node:     %s %s, XDP %s, pinned at %s", n.Interface, strings.Join(addrs, " "), orDash(n.AttachMode), n.PinPath)
	if n.FlowHash != "" {
		// What every node of the cluster must agree on.
		fmt.Fprintf(w, "; flow hash %s, tables of %d", n.FlowHash, n.TableSize)
		if !n.PingVIPs {
			fmt.Fprint(w, "; pings to VIPs dropped")
		}
	}
	fmt.Fprintln(w)
	c := st.Config
	fmt.Fprintf(w, "Config:   %s, generation %d, last reload %s: ", c.Path, c.Generation, c.LastReload.Local().Format(time.DateTime))
	switch {
	case c.Result == api.ResultOK:
		fmt.Fprintln(w, "ok")
	case c.LoadError == "" && c.ApplyError != "":
		// The new configuration runs: its services are the ones below.
		fmt.Fprintln(w, "loaded, NOT FULLY APPLIED (this configuration runs; what failed is retried every few seconds)")
	case c.ApplyError != "":
		fmt.Fprintln(w, "FAILED (the previous configuration keeps running, and not all of it is applied)")
	default:
		fmt.Fprintln(w, "FAILED (the previous configuration keeps running)")
	}
	if c.Result != api.ResultOK {
		for _, line := range strings.Split(strings.TrimRight(c.Error, "\n"), "\n") {
			fmt.Fprintln(w, "          "+line)
		}
	}
	if len(st.Reconciles) > 0 {
		var parts []string
		for _, trigger := range slices.Sorted(maps.Keys(st.Reconciles)) {
			r := st.Reconciles[trigger]
			parts = append(parts, fmt.Sprintf("%s %d× (last %s, mean %s)", trigger, r.Count,
				seconds(r.LastSeconds), seconds(r.SumSeconds/float64(max(r.Count, 1)))))
		}
		fmt.Fprintf(w, "Applied:  %s\n", strings.Join(parts, "; "))
	}
	fmt.Fprintf(w, "Version:  %s\n\n", st.Version)
	if st.BGP != nil {
		printBGP(w, st.BGP, now)
	}
	if st.L2 != nil {
		printL2(w, st.L2, now)
	}

	// Every row has every cell, so that the columns line up; the empty
	// cells' padding at the ends of lines is trimmed afterwards.
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tADDRESS\tFORWARDING\tWEIGHT\tHEALTH\tLAST CHECK\tPACKETS\tBYTES\tLAST ERROR")
	for _, s := range st.Services {
		fwd := s.Forwarding
		if s.Flows != "" && s.Flows != string(config.FlowsStateless) {
			fwd += ", " + s.Flows
		}
		if s.Affinity != "" && s.Affinity != string(config.AffinityNone) {
			fwd += ", affinity " + s.Affinity
		}
		if !s.Installed {
			fwd += " (not installed)"
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t\t%s\t\t%d\t%d\t\n", s.Name, netip.AddrPortFrom(s.VIP, s.Port), s.Protocol, fwd, orDash(s.State), s.Counters.Packets, s.Counters.Bytes)
		if len(s.SourceRanges) > 0 || s.SourceRangeDrops.Packets > 0 {
			// The packets and bytes of this row are the ones turned away.
			fmt.Fprintf(tw, "  sources\t\t\t\t\t\t%d\t%d\tdropped, not from %s\n", s.SourceRangeDrops.Packets, s.SourceRangeDrops.Bytes, sourcesText(s.SourceRanges))
		}
		for _, b := range s.Backends {
			health, last := backendHealth(b.Health, now)
			fmt.Fprintf(tw, "  backend\t%s\t\t%d\t%s\t%s\t%d\t%d\t%s\n", netip.AddrPortFrom(b.Address, b.Port), b.Weight,
				health, last, b.Counters.Packets, b.Counters.Bytes, oneLine(b.Health.LastError))
		}
	}
	if len(st.Services) == 0 {
		fmt.Fprintln(tw, "(no services)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) {
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}

	if p := st.Policy; p.DenyPrefixes > 0 || p.Denied > 0 {
		fmt.Fprintf(w, "\nDeny list: %d prefixes (policy.deny), %d packets to VIPs denied\n", p.DenyPrefixes, p.Denied)
	}
	if st.NAT != nil {
		printNAT(w, st.NAT, st.Services)
	}

	var reasons []string
	for _, r := range slices.Sorted(maps.Keys(st.Reasons)) {
		if st.Reasons[r] != 0 {
			reasons = append(reasons, r)
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REASON\tPACKETS")
	for _, r := range reasons {
		fmt.Fprintf(tw, "%s\t%d\n", r, st.Reasons[r])
	}
	return tw.Flush()
}

// printNAT writes the NAT session table's line and what its counters
// say needs doing.
func printNAT(w io.Writer, n *api.NAT, services []api.Service) {
	pct := 0.0
	if n.Capacity > 0 {
		pct = 100 * float64(n.Sessions) / float64(n.Capacity)
	}
	from := n.Address.String()
	if n.Address6.IsValid() {
		from += " and " + n.Address6.String()
	}
	fmt.Fprintf(w, "\nNAT:      %d/%d sessions (%.1f%%), %d embryonic; from %s ports %s\n", n.Sessions, n.Capacity, pct, n.Embryonic, from, n.Ports)
	fmt.Fprintf(w, "          created %d, expired %d (%d without a reply), allocation failures %d, reverse misses %d, fragments dropped %d, ICMP translated %d\n",
		n.Created, n.Expired, n.NoReply, n.AllocFailures, n.ReverseMisses, n.FragmentsDropped, n.ICMPTranslated)
	if n.NoReply > 0 && slices.ContainsFunc(services, func(s api.Service) bool { return s.Forwarding == string(config.DNAT) }) {
		fmt.Fprintln(w, "          sessions without a reply: a dnat backend's route to its clients must go through this node (its replies keep the client's address); check the backends' routes")
	}
	if n.AllocFailures > 0 {
		fmt.Fprintln(w, "          allocation failures: new connections found no free port or no room; widen nat.ports (each backend address, port and protocol has one session per port) or raise nat.sessions (a restart)")
	}
	if n.ExpireError != "" {
		fmt.Fprintln(w, "          reclaiming expired sessions fails: "+oneLine(n.ExpireError))
	}
}

// runSessions prints a sample of the NAT sessions q names.
func runSessions(socket string, q api.SessionQuery, asJSON bool) error {
	out, err := api.GetSessions(socket, q)
	switch {
	case errors.Is(err, api.ErrNotRunning):
		return fmt.Errorf("%w: start it with `xlb agent --config FILE`, or point to its socket with --socket PATH or --config FILE", err)
	case errors.Is(err, api.ErrNoSessions):
		return fmt.Errorf("%w: upgrade the agent", err)
	case err != nil:
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return printSessions(os.Stdout, out)
}

// printSessions writes the sessions of each service as a table.
func printSessions(w io.Writer, out *api.Sessions) error {
	for i, s := range out.Services {
		if i > 0 {
			fmt.Fprintln(w)
		}
		more := ""
		if s.More {
			more = fmt.Sprintf(" (the first %d; it has more)", len(s.Sessions))
		}
		fmt.Fprintf(w, "%s %s/%s, %s: %d sessions%s\n", s.Name, netip.AddrPortFrom(s.VIP, s.Port), s.Protocol, s.Forwarding, len(s.Sessions), more)
		if len(s.Sessions) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIENT\tBACKEND\tBACKEND SEES\tSTATE\tREPLIED\tIDLE")
		for _, x := range s.Sessions {
			replied := "no"
			if x.Replied {
				replied = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.Client, x.Backend, x.Source, x.State, replied, roundAgo(x.Idle()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// backendHealth formats a backend's health for the HEALTH and LAST CHECK
// columns, e.g. "down (http)" and "300ms ago, took 1.2ms".
func backendHealth(h api.Health, now time.Time) (health, last string) {
	if h.Check == "" || h.Check == "none" {
		return "- (no check)", "-"
	}
	health = orDash(h.State) + " (" + h.Check + ")"
	if h.LastCheck.IsZero() {
		return health, "-"
	}
	took := time.Duration(h.LatencyMs * float64(time.Millisecond))
	return health, fmt.Sprintf("%s ago, took %s", roundAgo(now.Sub(h.LastCheck)), took.Round(100*time.Microsecond))
}

// roundAgo rounds d to what a reader of a status table can use.
func roundAgo(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0 // clocks of agent and reader may differ a little
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// oneLine keeps an error message from breaking the table.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// seconds formats a duration given in seconds, rounded for reading.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// countersStale is the age from which status says when a session's
// counters were read: the agent reads them at most a second apart.
const countersStale = 5 * time.Second

// count formats a counter the agent may not know: "?" then.
func count[T int | uint64](v *T) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprint(*v)
}

// peerNotes are the lines under the peer table about peer p: a session
// held down for its prefix limit, counters that are unknown or old.
func peerNotes(p api.Peer, now time.Time) []string {
	var notes []string
	if l := p.PrefixLimit; l != nil {
		again := "it may re-form now"
		if wait := l.RetryAt.Sub(now); wait > 0 {
			again = fmt.Sprintf("it may re-form in %s", wait.Round(time.Second))
		}
		times := ""
		if l.Times > 1 {
			times = fmt.Sprintf(", %d times in a row (each hold twice the last)", l.Times)
		}
		notes = append(notes, fmt.Sprintf("peer %s: session closed %s ago, because the peer sent more than %d prefixes (maxPrefixes)%s; %s. "+
			"xlb imports no routes: make the router send this node none (or a default route only), or raise maxPrefixes "+
			"(bgp.peers[].maxPrefixes, or the BGPPeer's spec.maxPrefixes), which re-forms the session at once",
			p.Address, roundAgo(now.Sub(l.At)), l.Limit, times, again))
	}
	switch {
	case p.PrefixesReceived == nil:
		notes = append(notes, fmt.Sprintf("peer %s: counters unknown (?): the BGP speaker has not reported them since the session last changed state; "+
			"it answers between two UPDATEs it processes, and a peer that sends many makes that slow: run xlb status again", p.Address))
	case now.Sub(p.CountersAt) >= countersStale:
		notes = append(notes, fmt.Sprintf("peer %s: counters from %s ago: the BGP speaker is busy (it answers between two UPDATEs it processes); "+
			"run xlb status again for newer ones", p.Address, roundAgo(now.Sub(p.CountersAt))))
	}
	if g := p.GracefulRestart; g != nil {
		switch {
		case g.Negotiated == nil:
			notes = append(notes, fmt.Sprintf("peer %s: graceful restart %ds offered; whether the peer helps shows once the session is established", p.Address, g.RestartTimeSeconds))
		case *g.Negotiated:
			notes = append(notes, fmt.Sprintf("peer %s: graceful restart %ds negotiated: on SIGTERM the peer keeps this node's routes while the agent restarts", p.Address, g.RestartTimeSeconds))
		default:
			notes = append(notes, fmt.Sprintf("peer %s: graceful restart %ds offered, but the peer did not advertise it: on SIGTERM it drops this node's routes at once, with no drain; "+
				"enable graceful restart on the router (FRR: bgp graceful-restart), or send SIGUSR1 to stop the agent (withdraw, drain)", p.Address, g.RestartTimeSeconds))
		}
	}
	return notes
}

// printBGP writes the BGP sessions and routes.
func printBGP(w io.Writer, b *api.BGP, now time.Time) {
	var hops []string
	for _, h := range []netip.Addr{b.NextHop, b.NextHop6} {
		if h.IsValid() {
			hops = append(hops, h.String())
		}
	}
	if len(hops) == 0 {
		hops = append(hops, "none")
	}
	fmt.Fprintf(w, "BGP:      AS %d, router ID %s, next hop %s\n", b.ASN, b.RouterID, strings.Join(hops, " and "))
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tAS\tSTATE\tSINCE\tSENT\tRECEIVED/MAX\tMSGS IN/OUT\tFLAPS\tBFD\tLAST ERROR")
	var notes []string
	for _, p := range b.Peers {
		since := "-"
		if !p.Since.IsZero() {
			since = now.Sub(p.Since).Round(time.Second).String() + " ago"
		}
		bfd := "-"
		if p.BFD != nil {
			bfd = p.BFD.State
			if p.BFD.DetectionMs > 0 {
				bfd += fmt.Sprintf(" (detect %gms)", p.BFD.DetectionMs)
			}
		}
		state := p.State
		if p.HeldDown != "" {
			state += " (held down: " + oneLine(p.HeldDown) + ")"
		}
		if l := p.PrefixLimit; l != nil {
			state += " (held down: over maxPrefixes)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s/%d\t%s/%s\t%d\t%s\t%s\n", p.Address, p.ASN, state, since,
			count(p.PrefixesSent), count(p.PrefixesReceived), p.MaxPrefixes, count(p.MessagesReceived), count(p.MessagesSent),
			p.Flaps, bfd, orDash(oneLine(p.LastError)))
		notes = append(notes, peerNotes(p, now)...)
	}
	tw.Flush()
	for _, line := range strings.Split(strings.TrimRight(table.String(), "\n"), "\n") {
		fmt.Fprintln(w, "  "+strings.TrimRight(line, " "))
	}
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
	for _, r := range b.Routes {
		if r.Announced && r.Reason != "" {
			// Announced, but something is pending: a withdrawal the
			// speaker refused, retried until it holds.
			fmt.Fprintf(w, "  route %s: announced (%s)\n", r.Prefix, oneLine(r.Reason))
		} else if r.Announced && len(r.Peers) > 0 {
			fmt.Fprintf(w, "  route %s: announced to %s only\n", r.Prefix, joinAddrs(r.Peers))
		} else if r.Announced {
			fmt.Fprintf(w, "  route %s: announced\n", r.Prefix)
		} else {
			fmt.Fprintf(w, "  route %s: withdrawn (%s)\n", r.Prefix, oneLine(r.Reason))
		}
	}
	fmt.Fprintln(w)
}

// printL2 writes layer-2 mode: the nodes as this one sees them, and who
// answers ARP for each VIP.
func printL2(w io.Writer, l *api.L2, now time.Time) {
	msDur := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	fmt.Fprintf(w, "L2:       node %s, ARP on %s at %s; heartbeat %s, dead after %s; alive %s (since %s ago)\n", l.Node, l.Interface, l.MAC,
		msDur(l.HeartbeatMs), msDur(l.DeadAfterMs), strings.Join(l.Alive, " "), roundAgo(now.Sub(l.AliveSince)))
	if l.Error != "" {
		fmt.Fprintf(w, "  ERROR: %s\n", oneLine(l.Error))
	}
	var nodes, vips strings.Builder
	tw := tabwriter.NewWriter(&nodes, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tLAST HEARD")
	for _, n := range l.Nodes {
		state := "dead"
		if n.Alive {
			state = "alive"
		}
		addr := "-" // a cluster's nodes are known by their Leases
		if n.Address.IsValid() {
			addr = n.Address.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\n", n.Name, addr, state, msDur(n.LastHeardMs).Round(time.Millisecond))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(&vips, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VIP\tOWNER\tTHIS NODE")
	for _, v := range l.VIPs {
		here := "-"
		switch {
		case v.Answering:
			here = "answering since " + roundAgo(now.Sub(v.Since)).String() + " ago"
		case v.Why != "":
			here = "not served: " + oneLine(v.Why)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.VIP, orDash(v.Owner), here)
	}
	tw.Flush()
	for _, line := range strings.Split(strings.TrimRight(nodes.String()+vips.String(), "\n"), "\n") {
		fmt.Fprintln(w, "  "+strings.TrimRight(line, " "))
	}
	if len(l.Dropped) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(l.Dropped)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, l.Dropped[k]))
		}
		fmt.Fprintf(w, "  heartbeats refused: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}

// sourcesText lists a service's source ranges for the status table: a
// few by name, then how many more (a service whose ranges were removed
// may still show what they dropped).
func sourcesText(ranges []string) string {
	const shown = 3
	switch {
	case len(ranges) == 0:
		return "(no ranges now)"
	case len(ranges) <= shown:
		return strings.Join(ranges, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ranges[:shown], ","), len(ranges)-shown)
}

// joinAddrs lists addresses, comma-separated.
func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
