package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// Sharing an address. Services share one only when each says so: the
// same sharing key (annotation api.AnnotationSharingKey), in the same
// namespace, so that no Service of another namespace can put ports on
// someone else's address. Each port of a Service is an xlb service of its
// own (VIP, port, protocol), so nothing else has to agree between them:
// a port in common is the one thing that cannot be served twice.

// Port is a Service port as far as sharing goes: a number and a protocol
// (TCP, UDP, SCTP).
type Port struct {
	Port     int32
	Protocol string
}

func (p Port) String() string { return fmt.Sprintf("%d/%s", p.Port, p.Protocol) }

// Sharable returns why the Service of req may not hold addr beside the
// other Services that hold it (another sharing key or none, another
// namespace, a port in common); nil if it may.
func (a *Allocator) Sharable(req Request, addr netip.Addr) error {
	if !addr.IsValid() {
		return nil
	}
	if err := a.sharable(req, addr); err != nil {
		return fmt.Errorf("address %w", err)
	}
	return nil
}

// sharable reports whether the Service of req may hold x beside the
// other Services that hold it, and if not, why (an *Error whose message
// continues "address …", for the caller to prefix).
func (a *Allocator) sharable(req Request, x netip.Addr) error {
	for _, key := range a.holders[x] {
		if key == req.Key {
			continue
		}
		h := a.held[holdKey{key, x.Is6()}]
		switch {
		case h.sharing == "" || req.Sharing == "":
			return failf(ReasonAddressTaken, "%s is taken by Service %s; Services share an address only if all of them have the annotation %s with the same value, in one namespace",
				x, key, api.AnnotationSharingKey)
		case h.namespace != req.Namespace || h.sharing != req.Sharing:
			return failf(ReasonAddressTaken, "%s is taken by Service %s, whose sharing key is %q, not %q; Services share an address only with the same sharing key, in one namespace",
				x, key, h.sharing, req.Sharing)
		}
		if common := commonPorts(h.ports, req.Ports); len(common) > 0 {
			return failf(ReasonSharingConflict, "%s is shared with Service %s (sharing key %q), which has port %s too: a port of an address serves one Service",
				x, key, h.sharing, strings.Join(common, ", "))
		}
	}
	return nil
}

// commonPorts lists the ports that a and b both have.
func commonPorts(a, b []Port) []string {
	var out []string
	for _, p := range a {
		if slices.Contains(b, p) && !slices.Contains(out, p.String()) {
			out = append(out, p.String())
		}
	}
	return out
}

// planShared plans the address of a Service with a sharing key that
// requests no address: the address other Services of its namespace with
// the same key hold, if they hold one (ok). If it cannot join them, it
// is refused rather than given an address of its own, which would split
// the key over two addresses. Should the key's Services hold several
// addresses (their status said so on a restart, or one changed its key),
// the lowest one it may join is taken.
func (a *Allocator) planShared(req Request) (addr netip.Addr, err error, ok bool) {
	var group []netip.Addr
	for k, h := range a.held {
		if k.key != req.Key && k.v6 == req.IPv6 && h.namespace == req.Namespace && h.sharing == req.Sharing && !slices.Contains(group, h.addr) {
			group = append(group, h.addr)
		}
	}
	if len(group) == 0 {
		return netip.Addr{}, nil, false
	}
	slices.SortFunc(group, netip.Addr.Compare)
	var why []string
	for _, x := range group {
		if reason := a.joinable(req, x); reason != "" {
			why = append(why, reason)
			continue
		}
		return x, nil, true
	}
	return netip.Addr{}, failf(ReasonSharingConflict, "the Services with sharing key %q in namespace %s hold %s, and this Service cannot join them: %s; "+
		"give it other ports, or another sharing key (or none) for an address of its own",
		req.Sharing, req.Namespace, list(addrs(group), ", "), list(why, "; ")), true
}

// joinable says why the Service of req cannot join the group's address
// x; "" if it can.
func (a *Allocator) joinable(req Request, x netip.Addr) string {
	addr := x
	if why, ok := a.reserved[x]; ok {
		return fmt.Sprintf("%s is %s, which no Service may have", addr, why)
	}
	p := a.poolOf(x)
	switch {
	case p == nil:
		return fmt.Sprintf("%s is in no address pool any more", addr)
	case req.Pool != "" && p.Name != req.Pool:
		return fmt.Sprintf("%s belongs to address pool %q, not to the requested pool %q", addr, p.Name, req.Pool)
	}
	if ok, why := p.Eligible(req.Namespace, req.NamespaceLabels, req.Labels); !ok {
		return fmt.Sprintf("%s belongs to address pool %q, which %s", addr, p.Name, why)
	}
	if err := a.sharable(req, x); err != nil {
		return err.Error()
	}
	return ""
}

func addrs(xs []netip.Addr) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}
