package agent

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// diffConfigs says what replacing old by cfg would change, in the
// file's words: services added, removed and changed, the bgp section,
// and the settings that only a restart applies.
func diffConfigs(old, cfg *config.Config) *api.Check {
	c := &api.Check{}
	c.Restart = restartChanges(old, cfg)
	c.BGP = bgpChanges(old.BGP, cfg.BGP)
	if what := prefixChanges(old.Policy.Deny, cfg.Policy.Deny, "no source denied"); what != "" {
		c.Policy = append(c.Policy, "deny: "+what)
	}
	// The nat section but its table size applies at once.
	o, n := old.NAT, cfg.NAT
	o.Sessions, n.Sessions = 0, 0
	fieldChanges("nat.", reflect.ValueOf(o), reflect.ValueOf(n), &c.NAT)
	before := servicesByName(old)
	for _, s := range cfg.Services {
		o := before[s.Name]
		if o == nil {
			c.Added = append(c.Added, fmt.Sprintf("%s (%s, %d backends)", s.Name, s.Key(), len(s.Backends)))
			continue
		}
		if what := serviceDiff(*o, s); len(what) > 0 {
			c.Changed = append(c.Changed, api.ServiceChange{Name: s.Name, Changes: what})
		}
	}
	after := servicesByName(cfg)
	for _, s := range old.Services {
		if after[s.Name] == nil {
			c.Removed = append(c.Removed, fmt.Sprintf("%s (%s)", s.Name, s.Key()))
		}
	}
	return c
}

// restartChanges lists the changed settings that take effect only when
// the agent restarts (see warnRestartOnly).
func restartChanges(old, cfg *config.Config) []string {
	var out []string
	// node.announce as written: bgp when left out.
	on, nn := old.Node, cfg.Node
	on.Announce, nn.Announce = config.Announce(announceName(old)), config.Announce(announceName(cfg))
	fieldChanges("node.", reflect.ValueOf(on), reflect.ValueOf(nn), &out)
	fieldChanges("api.", reflect.ValueOf(old.API), reflect.ValueOf(cfg.API), &out)
	fieldChanges("dataplane.", reflect.ValueOf(old.Dataplane), reflect.ValueOf(cfg.Dataplane), &out)
	if old.NAT.Sessions != cfg.NAT.Sessions {
		out = append(out, fmt.Sprintf("nat.sessions: %d → %d", old.NAT.Sessions, cfg.NAT.Sessions))
	}
	if !reflect.DeepEqual(old.L2, cfg.L2) {
		out = append(out, "l2: the election's nodes and timers change when the agent restarts")
	}
	return out
}

// bgpChanges lists what changes in the bgp section.
func bgpChanges(old, cfg *config.BGP) []string {
	switch {
	case old == nil && cfg == nil:
		return nil
	case old == nil:
		return []string{fmt.Sprintf("bgp section added (AS %d, %d peers): the node starts announcing its VIPs", cfg.ASN, len(cfg.Peers))}
	case cfg == nil:
		return []string{"bgp section removed: every route is withdrawn and nothing is announced"}
	}
	var out []string
	o, n := *old, *cfg
	o.Peers, n.Peers = nil, nil
	fieldChanges("bgp.", reflect.ValueOf(o), reflect.ValueOf(n), &out)
	if old.ASN != cfg.ASN || old.RouterID != cfg.RouterID || old.ListenPort != cfg.ListenPort {
		out = append(out, "the BGP speaker starts anew for the new asn, routerID or listenPort: every session goes down and comes back")
	}
	peers := func(b *config.BGP) map[netip.Addr]config.Peer {
		m := make(map[netip.Addr]config.Peer, len(b.Peers))
		for _, p := range b.Peers {
			m[p.Address] = p
		}
		return m
	}
	had, has := peers(old), peers(cfg)
	for _, p := range cfg.Peers {
		if q, ok := had[p.Address]; !ok {
			out = append(out, fmt.Sprintf("peer %s added (AS %d)", p.Address, p.ASN))
		} else {
			fieldChanges("peer "+p.Address.String()+" ", reflect.ValueOf(q), reflect.ValueOf(p), &out)
		}
	}
	for _, p := range old.Peers {
		if _, ok := has[p.Address]; !ok {
			out = append(out, fmt.Sprintf("peer %s removed", p.Address))
		}
	}
	return out
}

// serviceDiff lists what changes in one service (same name).
func serviceDiff(old, s config.Service) []string {
	var out []string
	type head struct {
		VIP            netip.Addr
		Port           uint16
		Protocol       config.Protocol
		Forwarding     config.Forwarding
		TranslatePorts bool
		Flows          config.Flows
		Affinity       config.Affinity
	}
	h := func(s config.Service) head {
		return head{s.VIP, s.Port, s.Protocol, s.Forwarding, s.TranslatePorts, s.Flows, s.Affinity}
	}
	fieldChanges("", reflect.ValueOf(h(old)), reflect.ValueOf(h(s)), &out)
	if what := prefixChanges(old.SourceRanges, s.SourceRanges, "every source"); what != "" {
		out = append(out, "sourceRanges: "+what)
	}
	if !old.BGP.Equal(s.BGP) {
		out = append(out, "bgp (the route's attributes) changed")
	}
	if !slices.EqualFunc(old.History, s.History, func(a, b config.Generation) bool {
		return a.Until.Equal(b.Until) && slices.Equal(a.Backends, b.Backends)
	}) {
		out = append(out, fmt.Sprintf("history: %d → %d earlier backend sets", len(old.History), len(s.History)))
	}
	key := func(b config.Backend) netip.AddrPort { return netip.AddrPortFrom(b.Address, b.Port) }
	had := make(map[netip.AddrPort]config.Backend, len(old.Backends))
	for _, b := range old.Backends {
		had[key(b)] = b
	}
	has := make(map[netip.AddrPort]bool, len(s.Backends))
	// A health check changed alike for every backend (the service's) is
	// said once.
	var checks [][]string
	for _, b := range s.Backends {
		if o, ok := had[key(b)]; ok {
			var c []string
			fieldChanges("healthCheck.", reflect.ValueOf(o.HealthCheck), reflect.ValueOf(b.HealthCheck), &c)
			checks = append(checks, c)
		}
	}
	alike := len(checks) > 1 && len(checks[0]) > 0 && !slices.ContainsFunc(checks, func(c []string) bool { return !slices.Equal(c, checks[0]) })
	if alike {
		for _, c := range checks[0] {
			out = append(out, "every backend's "+c)
		}
	}
	for _, b := range s.Backends {
		has[key(b)] = true
		o, ok := had[key(b)]
		if !ok {
			out = append(out, fmt.Sprintf("backend %s added (weight %d)", key(b), b.Weight))
			continue
		}
		if alike {
			o.HealthCheck = b.HealthCheck
		}
		fieldChanges("backend "+key(b).String()+" ", reflect.ValueOf(o), reflect.ValueOf(b), &out)
	}
	for _, b := range old.Backends {
		if !has[key(b)] {
			out = append(out, fmt.Sprintf("backend %s removed", key(b)))
		}
	}
	return out
}

// fieldChanges appends "PREFIXfield: old → new" for every field of the
// structs a and b (or what pointers to them point to) that differs,
// named as the file names it; prefix is "" or ends in "." or " ". A
// password is never shown.
func fieldChanges(prefix string, a, b reflect.Value, out *[]string) {
	if a.Kind() == reflect.Pointer {
		name := strings.TrimRight(prefix, ". ")
		switch {
		case a.IsNil() && b.IsNil():
			return
		case a.IsNil():
			*out = append(*out, name+": added")
			return
		case b.IsNil():
			*out = append(*out, name+": removed")
			return
		}
		a, b = a.Elem(), b.Elem()
	}
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		x, y := a.Field(i), b.Field(i)
		if reflect.DeepEqual(x.Interface(), y.Interface()) {
			continue
		}
		name := prefix + fileName(f.Name)
		switch {
		case f.Name == "Password":
			*out = append(*out, name+": changed")
		case x.Kind() == reflect.Pointer && x.Type().Elem().Kind() == reflect.Struct,
			x.Kind() == reflect.Struct && x.Type() != reflect.TypeFor[time.Time]() && x.Type() != reflect.TypeFor[netip.Addr]() && x.Type() != reflect.TypeFor[config.PortRange]():
			fieldChanges(name+".", x, y, out)
		default:
			*out = append(*out, fmt.Sprintf("%s: %s → %s", name, show(x), show(y)))
		}
	}
}

// fileNames are the fields whose name in the file is not their Go name
// with a lower-case start.
var fileNames = map[string]string{
	"StatusMin": "expectStatus (lowest)", "StatusMax": "expectStatus (highest)",
	"HealthCheck": "healthCheck",
	"TCPSyn":      "tcpSyn", "TCPEstablished": "tcpEstablished", "TCPClosing": "tcpClosing",
	"TCPTimeWait": "tcpTimeWait",
}

// fileName is a Go field's name in the file: RouterID → routerID,
// ASN → asn, TableSize → tableSize.
func fileName(goName string) string {
	if n, ok := fileNames[goName]; ok {
		return n
	}
	if strings.ToUpper(goName) == goName {
		return strings.ToLower(goName)
	}
	r := []rune(goName)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

// show formats a setting's value; an unset address or text as "(unset)".
func show(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case netip.Addr:
		if !x.IsValid() {
			return "(unset)"
		}
	case *uint32:
		if x == nil {
			return "(unset)"
		}
		return fmt.Sprint(*x)
	}
	if v.Kind() == reflect.String && v.Len() == 0 {
		return "(unset)"
	}
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprint(v.Interface())
}

// prefixChanges says how a list of prefixes changes: the prefixes added
// and removed (a few by name, more by count), or "" when it holds the
// same prefixes; empty says what an empty list means.
func prefixChanges(old, cfg []netip.Prefix, empty string) string {
	had := make(map[netip.Prefix]bool, len(old))
	for _, p := range old {
		had[p] = true
	}
	has := make(map[netip.Prefix]bool, len(cfg))
	var added, removed []string
	for _, p := range cfg {
		if !has[p] && !had[p] {
			added = append(added, p.String())
		}
		has[p] = true
	}
	for _, p := range old {
		if !has[p] {
			removed = append(removed, p.String())
			has[p] = true // once
		}
	}
	if len(added)+len(removed) == 0 {
		return ""
	}
	list := func(verb string, ps []string) string {
		if len(ps) > 5 {
			return fmt.Sprintf("%d %s", len(ps), verb)
		}
		return verb + " " + strings.Join(ps, ", ")
	}
	var parts []string
	if len(added) > 0 {
		parts = append(parts, list("added", added))
	}
	if len(removed) > 0 {
		parts = append(parts, list("removed", removed))
	}
	what := strings.Join(parts, "; ")
	switch {
	case len(old) == 0:
		what += " (was: " + empty + ")"
	case len(cfg) == 0:
		what += " (now: " + empty + ")"
	}
	return fmt.Sprintf("%d → %d prefixes: %s", len(old), len(cfg), what)
}
