package allocator

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// Reason classifies why an allocation failed; the values are stable (they
// label metrics and start Event messages).
type Reason string

// Reasons of allocation failures.
const (
	// ReasonPoolExhausted: every address of the pools the Service may
	// use is taken.
	ReasonPoolExhausted Reason = "PoolExhausted"
	// ReasonAddressTaken: the requested address belongs to another
	// Service.
	ReasonAddressTaken Reason = "AddressTaken"
	// ReasonOutsidePools: the requested address is in no pool.
	ReasonOutsidePools Reason = "AddressOutsidePools"
	// ReasonNoEligiblePool: no auto-assign pool serves the Service.
	ReasonNoEligiblePool Reason = "NoEligiblePool"
	// ReasonNotEligible: the requested address or pool does not serve
	// the Service (namespace, selectors, avoidBuggyIPs).
	ReasonNotEligible Reason = "NotEligible"
	// ReasonUnknownPool: the requested pool does not exist or is
	// invalid.
	ReasonUnknownPool Reason = "UnknownPool"
	// ReasonInvalidRequest: the request itself is unusable (an address
	// of the other family, an address outside the requested pool).
	ReasonInvalidRequest Reason = "InvalidRequest"
	// ReasonNodeAddress: the requested address is a node's own
	// address (see SetReserved).
	ReasonNodeAddress Reason = "NodeAddress"
	// ReasonSharingConflict: the Service has a sharing key, and the
	// address of the Services with the same key cannot be its own too
	// (a port in common, another pool requested, a pool that does not
	// serve it).
	ReasonSharingConflict Reason = "SharingConflict"
)

// Error is an allocation failure: a Reason and a message for the user.
type Error struct {
	Reason Reason
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func failf(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the Reason of an allocation error, or "" for nil and
// for errors that are not allocation failures.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Request describes a Service that wants an address.
type Request struct {
	// Key identifies the Service ("namespace/name"); the allocator
	// records addresses under it.
	Key string
	// Namespace, Labels and NamespaceLabels decide which pools serve it.
	Namespace       string
	Labels          map[string]string
	NamespaceLabels map[string]string
	// IPv6: the request is for the Service's IPv6 address; otherwise
	// for its IPv4 one. A dual-stack Service makes one request of each
	// family, under one Key: it holds an address of each.
	IPv6 bool
	// Address is a requested address, of the request's family; the
	// zero Addr requests none.
	Address netip.Addr
	// Pool is a requested pool; "" requests none.
	Pool string
	// Sharing is the Service's sharing key; "" shares with nobody.
	// Services of one namespace with the same key may hold one address
	// when no port of one is a port of another (see share.go).
	Sharing string
	// Ports are the Service's ports, which decide whether it may share.
	Ports []Port
}

// Allocator remembers which Service holds which address. It is not safe
// for concurrent use: the controller serializes all allocation decisions
// in one goroutine, which is what makes them race-free.
type Allocator struct {
	pools    []*Pool          // accepted, in allocation order
	byName   map[string]*Pool // accepted
	rejected map[string]error // pool name → why it is not used
	// holders: the Services holding each address, sorted (several
	// only when they share it); held: each Service's holding of each
	// family.
	holders map[netip.Addr][]string
	held    map[holdKey]*holding
	used    map[poolFam]uint64 // addresses of each pool's family held, reserved ones left out
	// reserved: addresses nobody gets (the nodes' own), with whose
	// they are; excluded counts those each pool would hand out.
	reserved map[netip.Addr]string
	excluded map[poolFam]uint64
}

// holdKey is a Service's holding of one family.
type holdKey struct {
	key string
	v6  bool
}

// poolFam is the addresses of one family of a pool.
type poolFam struct {
	pool string
	v6   bool
}

// New returns an allocator with no pools and no addresses held.
func New() *Allocator {
	return &Allocator{
		byName:   map[string]*Pool{},
		rejected: map[string]error{},
		holders:  map[netip.Addr][]string{},
		held:     map[holdKey]*holding{},
		used:     map[poolFam]uint64{},
		reserved: map[netip.Addr]string{},
		excluded: map[poolFam]uint64{},
	}
}

// SetPools replaces the pools in use. A pool that shares an address with
// an earlier one in pools is rejected: callers pass the oldest first, so
// that a new pool cannot take addresses away from an existing one.
// invalid holds the pools that failed to parse (name → error), only so
// that a request naming one gets a precise message. SetPools returns every
// pool not in use with the reason, invalid ones included. Addresses held
// stay held, even those that no pool contains any more.
func (a *Allocator) SetPools(pools []*Pool, invalid map[string]error) map[string]error {
	rejected := map[string]error{}
	for name, err := range invalid {
		rejected[name] = err
	}
	var accepted []*Pool
	for _, p := range pools {
		if _, dup := rejected[p.Name]; dup {
			continue
		}
		if other, ok := overlap(p, accepted); ok {
			rejected[p.Name] = fmt.Errorf("address pool %q: %s; pools must not share addresses: change or remove one of them", p.Name, other)
			continue
		}
		accepted = append(accepted, p)
	}
	slices.SortFunc(accepted, compare)
	a.pools = accepted
	a.byName = make(map[string]*Pool, len(accepted))
	for _, p := range accepted {
		a.byName[p.Name] = p
	}
	a.rejected = rejected
	a.recount()
	return rejected
}

// SetReserved replaces the addresses no Service may get: the cluster's
// node addresses, as a VIP equal to a node's address takes that node off
// the network. why says whose each one is, for messages ("the InternalIP
// of Node lb-1"). Pools keep their other addresses. A Service holding a
// reserved address keeps holding it (Lookup, Holder) until it is given
// another or released, but Plan no longer plans it, and it counts as
// used in no pool.
func (a *Allocator) SetReserved(why map[netip.Addr]string) {
	a.reserved = make(map[netip.Addr]string, len(why))
	for addr, w := range why {
		if addr.IsValid() {
			a.reserved[addr.Unmap().WithZone("")] = w
		}
	}
	a.recount()
}

// Reserved reports whether addr is reserved, and whose it is.
func (a *Allocator) Reserved(addr netip.Addr) (why string, ok bool) {
	why, ok = a.reserved[addr]
	return why, ok
}

// ReservedIn returns, in order, the reserved addresses the named pool in
// use would otherwise hand out.
func (a *Allocator) ReservedIn(pool string) []netip.Addr {
	p := a.byName[pool]
	if p == nil {
		return nil
	}
	var out []netip.Addr
	for x := range a.reserved {
		if p.contains(x) {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// recount derives used and excluded from the pools, the holdings and the
// reserved addresses.
func (a *Allocator) recount() {
	a.used = map[poolFam]uint64{}
	for x := range a.holders {
		if p := a.poolOf(x); p != nil && !a.isReserved(x) {
			a.used[poolFam{p.Name, x.Is6()}]++
		}
	}
	a.excluded = map[poolFam]uint64{}
	for x := range a.reserved {
		if p := a.poolOf(x); p != nil {
			a.excluded[poolFam{p.Name, x.Is6()}]++
		}
	}
}

func (a *Allocator) isReserved(x netip.Addr) bool {
	_, ok := a.reserved[x]
	return ok
}

// size is the number of addresses of one family p hands out: its own,
// less the reserved ones.
func (a *Allocator) size(p *Pool, v6 bool) uint64 {
	return p.SizeOf(v6) - a.excluded[poolFam{p.Name, v6}]
}

// overlap finds a pool of others sharing an address with p and describes
// the overlap.
func overlap(p *Pool, others []*Pool) (string, bool) {
	for _, o := range others {
		for _, s := range p.spans {
			for _, t := range o.spans {
				if s.lo.BitLen() == t.lo.BitLen() && s.lo.Compare(t.hi) <= 0 && t.lo.Compare(s.hi) <= 0 {
					return fmt.Sprintf("%s overlaps %s of address pool %q", s.text, t.text, o.Name), true
				}
			}
		}
	}
	return "", false
}

// Pools returns the pools in use, in allocation order.
func (a *Allocator) Pools() []*Pool { return slices.Clone(a.pools) }

// Usage returns how many addresses of the named pool are held and how many
// it hands out, of both families (reserved addresses left out of both; a
// size beyond MaxUint64 is MaxUint64); ok is false for a pool not in use.
func (a *Allocator) Usage(pool string) (used, size uint64, ok bool) {
	p := a.byName[pool]
	if p == nil {
		return 0, 0, false
	}
	return a.used[poolFam{pool, false}] + a.used[poolFam{pool, true}], addSat(a.size(p, false), a.size(p, true)), true
}

// PoolOf returns the name of the pool in use that contains addr, or "".
func (a *Allocator) PoolOf(addr netip.Addr) string {
	if p := a.poolOf(addr); p != nil {
		return p.Name
	}
	return ""
}

func (a *Allocator) poolOf(x netip.Addr) *Pool {
	for _, p := range a.pools {
		if p.contains(x) {
			return p
		}
	}
	return nil
}

// Lookup returns the address of one family (v6: IPv6) the Service key
// holds.
func (a *Allocator) Lookup(key string, v6 bool) (netip.Addr, bool) {
	h, ok := a.held[holdKey{key, v6}]
	if !ok {
		return netip.Addr{}, false
	}
	return h.addr, true
}

// Holders returns the Services holding addr, sorted: one, or several
// that share it.
func (a *Allocator) Holders(addr netip.Addr) []string {
	return slices.Clone(a.holders[addr])
}

// Plan decides the address a Service should have, without recording it:
// the caller writes it to the Service and then calls Assign, so that a
// failed write leaves nothing to undo. An address the Service holds is
// kept as long as it still fits the request (the requested address, or
// an address of the requested pool; anything without a request) and the
// Services it shares it with (Sharable), even if no pool contains it any
// more: addresses do not move under running Services. Otherwise the
// requested address; or, with a sharing key, the address of the other
// Services with that key, which the Service joins or is refused
// (ReasonSharingConflict), never given another; or the lowest free
// address of the requested pool, or of the first eligible auto-assign
// pool in allocation order. A reserved address is never planned, not
// even the one the Service holds. Errors are *Error.
//
// The request is for one family (req.IPv6): only pools with addresses
// of that family count, and a pool is exhausted when its addresses of
// that family are.
func (a *Allocator) Plan(req Request) (netip.Addr, error) {
	if h, ok := a.held[holdKey{req.Key, req.IPv6}]; ok && a.fits(req, h.addr) && !a.isReserved(h.addr) && a.sharable(req, h.addr) == nil {
		return h.addr, nil
	}
	if req.Address.IsValid() {
		return a.planAddress(req)
	}
	if req.Sharing != "" {
		if addr, err, ok := a.planShared(req); ok {
			return addr, err
		}
	}
	if req.Pool != "" {
		p, err := a.requestedPool(req)
		if err != nil {
			return netip.Addr{}, err
		}
		if !p.Has(req.IPv6) {
			return netip.Addr{}, failf(ReasonNotEligible, "requested address pool %q has no %s addresses (it is an %s pool), and this is the Service's %s address; add %s ranges to it, or request another pool for this family",
				p.Name, family(req.IPv6), p.Family(), family(req.IPv6), family(req.IPv6))
		}
		x, ok := a.lowestFree(p, req.IPv6)
		if !ok {
			return netip.Addr{}, failf(ReasonPoolExhausted, "address pool %q is exhausted: all its %d %saddresses are in use%s", p.Name, a.size(p, req.IPv6), v6Word(req.IPv6), a.excludedNote(p, req.IPv6))
		}
		return x, nil
	}
	var full []string
	var why []string
	hasFamily := false
	for _, p := range a.pools {
		if !p.AutoAssign || !p.Has(req.IPv6) {
			continue
		}
		hasFamily = true
		if ok, reason := p.Eligible(req.Namespace, req.NamespaceLabels, req.Labels); !ok {
			why = append(why, fmt.Sprintf("%q %s", p.Name, reason))
			continue
		}
		if x, ok := a.lowestFree(p, req.IPv6); ok {
			return x, nil
		}
		full = append(full, fmt.Sprintf("%q (%d %saddresses%s)", p.Name, a.size(p, req.IPv6), v6Word(req.IPv6), a.excludedNote(p, req.IPv6)))
	}
	switch {
	case len(full) > 0:
		return netip.Addr{}, failf(ReasonPoolExhausted, "every address pool this Service may use is exhausted: %s; add addresses or delete Services", list(full, ", "))
	case len(why) > 0:
		return netip.Addr{}, failf(ReasonNoEligiblePool, "no auto-assign address pool serves this Service: %s", list(why, "; "))
	case req.IPv6 && !hasFamily:
		return netip.Addr{}, failf(ReasonNoEligiblePool, "no auto-assign address pool has IPv6 addresses, and the Service asks for an IPv6 address (spec.ipFamilies); add IPv6 ranges (e.g. 2001:db8:99::/120) to an AddressPool, or make the Service IPv4-only")
	case !hasFamily && len(a.pools) > 0:
		return netip.Addr{}, failf(ReasonNoEligiblePool, "no auto-assign address pool has IPv4 addresses, and the Service asks for an IPv4 address (spec.ipFamilies); add IPv4 ranges to an AddressPool, or make the Service IPv6-only")
	default:
		return netip.Addr{}, failf(ReasonNoEligiblePool, "no auto-assign address pool exists; create an AddressPool, or request one with autoAssign: false by name")
	}
}

// v6Word qualifies "addresses" in a message about IPv6 ones.
func v6Word(v6 bool) string {
	if v6 {
		return "IPv6 "
	}
	return ""
}

// family names the IPv6 family (v6) or the IPv4 one.
func family(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// excludedNote says, for an exhausted pool, how many of its addresses
// are nodes' own; "" when none are.
func (a *Allocator) excludedNote(p *Pool, v6 bool) string {
	if n := a.excluded[poolFam{p.Name, v6}]; n > 0 {
		return fmt.Sprintf(", not counting %d that are nodes' own addresses", n)
	}
	return ""
}

// maxListed bounds the pools a message lists, so that an Event stays
// readable in a cluster with many pools.
const maxListed = 5

func list(items []string, sep string) string {
	if len(items) <= maxListed {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%sand %d more", strings.Join(items[:maxListed], sep), sep, len(items)-maxListed)
}

// fits reports whether the held address x still satisfies req.
func (a *Allocator) fits(req Request, x netip.Addr) bool {
	switch {
	case req.Address.IsValid():
		return req.Address == x
	case req.Pool != "":
		p := a.poolOf(x)
		return p != nil && p.Name == req.Pool
	}
	return true
}

func (a *Allocator) planAddress(req Request) (netip.Addr, error) {
	addr := req.Address
	if err := checkAddr(addr); err != nil {
		return netip.Addr{}, failf(ReasonInvalidRequest, "requested address %s %v", addr, err)
	}
	if addr.Is6() != req.IPv6 {
		return netip.Addr{}, failf(ReasonInvalidRequest, "requested address %s is %s, and this is the Service's %s address; request an address of each family the Service has (spec.ipFamilies), comma separated in annotation %s",
			addr, family(addr.Is6()), family(req.IPv6), api.AnnotationAddresses)
	}
	x := addr
	if why, ok := a.reserved[x]; ok {
		return netip.Addr{}, failf(ReasonNodeAddress, "requested address %s is %s, and a VIP equal to a node's address takes that node off the network; request another address", addr, why)
	}
	var p *Pool
	for _, q := range a.pools {
		if q.inRange(x) {
			p = q
			break
		}
	}
	if p == nil {
		return netip.Addr{}, failf(ReasonOutsidePools, "requested address %s is outside every address pool; request an address of a pool, or add it to one", addr)
	}
	if req.Pool != "" && p.Name != req.Pool {
		return netip.Addr{}, failf(ReasonInvalidRequest, "requested address %s belongs to address pool %q, not to the requested pool %q; drop one of the two requests", addr, p.Name, req.Pool)
	}
	if ok, why := p.Eligible(req.Namespace, req.NamespaceLabels, req.Labels); !ok {
		return netip.Addr{}, failf(ReasonNotEligible, "requested address %s belongs to address pool %q, which %s", addr, p.Name, why)
	}
	if !p.contains(x) {
		return netip.Addr{}, failf(ReasonNotEligible, "requested address %s ends in .0 or .255, which address pool %q leaves out (avoidBuggyIPs)", addr, p.Name)
	}
	if err := a.sharable(req, x); err != nil {
		return netip.Addr{}, fmt.Errorf("requested address %w", err)
	}
	return addr, nil
}

func (a *Allocator) requestedPool(req Request) (*Pool, error) {
	p := a.byName[req.Pool]
	if p == nil {
		if err, ok := a.rejected[req.Pool]; ok {
			return nil, failf(ReasonUnknownPool, "requested address pool %q is not in use: %v", req.Pool, err)
		}
		return nil, failf(ReasonUnknownPool, "requested address pool %q does not exist", req.Pool)
	}
	if ok, why := p.Eligible(req.Namespace, req.NamespaceLabels, req.Labels); !ok {
		return nil, failf(ReasonNotEligible, "requested address pool %q %s", p.Name, why)
	}
	return p, nil
}

// lowestFree returns the lowest address of one family of p nobody holds.
func (a *Allocator) lowestFree(p *Pool, v6 bool) (netip.Addr, bool) {
	if a.used[poolFam{p.Name, v6}] >= a.size(p, v6) {
		return netip.Addr{}, false
	}
	// At most used+1 usable addresses are visited (plus the .0/.255
	// and reserved ones skipped): the search is as cheap as the pool is
	// full.
	for _, s := range p.spans {
		if s.lo.Is6() != v6 {
			continue
		}
		for x := s.lo; x.IsValid() && x.Compare(s.hi) <= 0; x = x.Next() {
			if (p.avoidBuggy && buggy(x)) || a.isReserved(x) {
				continue
			}
			if _, taken := a.holders[x]; !taken {
				return x, true
			}
		}
	}
	return netip.Addr{}, false
}

// Assign records that the Service of req holds addr, with its sharing
// key and ports, releasing the address it held before. It fails if
// others hold addr and the Service may not share it with them
// (Sharable). The address need not be in a pool: on a restart the
// controller assigns what the Services' status says, whatever the pools
// are now.
//
// The holding is of addr's family, whatever req.IPv6 says.
func (a *Allocator) Assign(req Request, addr netip.Addr) error {
	if !addr.IsValid() {
		return failf(ReasonInvalidRequest, "no address")
	}
	if err := checkAddr(addr); err != nil {
		return failf(ReasonInvalidRequest, "address %s %v", addr, err)
	}
	x := addr
	req.IPv6 = x.Is6()
	if err := a.sharable(req, x); err != nil {
		return fmt.Errorf("address %w", err)
	}
	h := &holding{addr: x, namespace: req.Namespace, sharing: req.Sharing, ports: slices.Clone(req.Ports)}
	hk := holdKey{req.Key, req.IPv6}
	if old, ok := a.held[hk]; ok && old.addr == x {
		a.held[hk] = h
		return nil
	}
	a.Release(req.Key, req.IPv6)
	a.held[hk] = h
	keys := a.holders[x]
	i, _ := slices.BinarySearch(keys, req.Key)
	a.holders[x] = slices.Insert(keys, i, req.Key)
	if len(keys) == 0 {
		if p := a.poolOf(x); p != nil && !a.isReserved(x) {
			a.used[poolFam{p.Name, x.Is6()}]++
		}
	}
	return nil
}

// Allocate is Plan followed by Assign.
func (a *Allocator) Allocate(req Request) (netip.Addr, error) {
	addr, err := a.Plan(req)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := a.Assign(req, addr); err != nil {
		return netip.Addr{}, err
	}
	return addr, nil
}

// Release frees the address of one family (v6: IPv6) key holds and
// returns it. The address is free once no other Service holds it
// (Holders).
func (a *Allocator) Release(key string, v6 bool) (netip.Addr, bool) {
	h, ok := a.held[holdKey{key, v6}]
	if !ok {
		return netip.Addr{}, false
	}
	delete(a.held, holdKey{key, v6})
	x := h.addr
	keys := slices.DeleteFunc(a.holders[x], func(k string) bool { return k == key })
	if len(keys) > 0 {
		a.holders[x] = keys
		return x, true
	}
	delete(a.holders, x)
	if p := a.poolOf(x); p != nil && !a.isReserved(x) {
		a.used[poolFam{p.Name, x.Is6()}]--
	}
	return x, true
}

// Holdings returns every held address by Service key, sorted by key,
// a Service's IPv4 address before its IPv6 one.
func (a *Allocator) Holdings() []Holding {
	out := make([]Holding, 0, len(a.held))
	for k, h := range a.held {
		out = append(out, Holding{Key: k.key, Addr: h.addr, Sharing: h.sharing, Ports: slices.Clone(h.ports)})
	}
	slices.SortFunc(out, func(p, q Holding) int { return cmp.Or(cmp.Compare(p.Key, q.Key), p.Addr.Compare(q.Addr)) })
	return out
}

// HoldingOf returns what the allocator records for the Service key's
// address of one family (v6: IPv6).
func (a *Allocator) HoldingOf(key string, v6 bool) (Holding, bool) {
	h, ok := a.held[holdKey{key, v6}]
	if !ok {
		return Holding{}, false
	}
	return Holding{Key: key, Addr: h.addr, Sharing: h.sharing, Ports: slices.Clone(h.ports)}, true
}

// Holding is an address and the Service holding it, with the sharing
// key and ports it was assigned with.
type Holding struct {
	Key     string
	Addr    netip.Addr
	Sharing string
	Ports   []Port
}

// holding is what the allocator records of a Service holding an address.
type holding struct {
	addr      netip.Addr
	namespace string
	sharing   string
	ports     []Port
}
