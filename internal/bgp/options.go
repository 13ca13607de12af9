package bgp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
)

// Defaults applied by Options.withDefaults.
const (
	DefaultPort = 179
	// DefaultHoldTime is xlb's, not RFC 4271's 90s: a dead node should be
	// routed around within seconds even without BFD.
	DefaultHoldTime = 9 * time.Second
	// connectRetry is how often a peer that cannot be reached is tried
	// again. GoBGP's default is two minutes; an xlb node that comes back
	// should be announcing again within seconds. The first attempt is
	// made at once (connect.go).
	connectRetry = 5 * time.Second
	// maxMD5KeyLen is the kernel's TCP_MD5SIG_MAXKEYLEN.
	maxMD5KeyLen = 80
	// asTrans (RFC 6793) stands in for 4-byte ASNs towards old speakers
	// and is never a real ASN.
	asTrans = 23456
	// DefaultMaxPrefixes is a peer's default prefix limit. xlb imports
	// nothing, yet GoBGP keeps every prefix a peer sends (its Adj-RIB-In)
	// for as long as the session lasts: the limit is what bounds that
	// memory. It is far above what a route reflector that reflects the
	// other nodes' VIPs sends, and far below a full table.
	DefaultMaxPrefixes = 10000
	// MaxMaxPrefixes is the highest prefix limit a peer may have.
	MaxMaxPrefixes = 100000
	// DefaultPrefixLimitRetry is how long a session that went over its
	// prefix limit first stays down (Options.PrefixLimitRetry).
	DefaultPrefixLimitRetry = 30 * time.Second
	// prefixLimitRetryMax bounds the doubling of that wait.
	prefixLimitRetryMax = 10 * time.Minute
)

// Options configure a Speaker.
type Options struct {
	// ASN is the local autonomous system number.
	ASN uint32
	// RouterID is the BGP identifier, an IPv4 address. Default: NextHop;
	// required when the node has no IPv4 address.
	RouterID netip.Addr
	// NextHop is the node's IPv4 address: the next hop of every announced
	// IPv4 route and the local address of every session to an IPv4 peer.
	// It may be left out when NextHop6 is set.
	NextHop netip.Addr
	// NextHop6 is the node's IPv6 address: the next hop of every announced
	// IPv6 route and the local address of every session to an IPv6 peer.
	// Optional. With both set, every session carries both address
	// families (multiprotocol BGP, RFC 4760), whatever its own family.
	NextHop6 netip.Addr
	// ListenPort is the TCP port for incoming sessions, bound on NextHop
	// and NextHop6 only. 0 picks the default: 179 when a peer is Passive, else -1.
	// -1 opens no listening socket on the network (peers must then not
	// be Passive); the speaker then listens on 127.0.0.1 only, on a port
	// the kernel picks, for the sessions it opens itself (connect.go).
	ListenPort int
	// Peers are the BGP neighbours.
	Peers []Peer
	// PrefixLimitRetry is how long a session that a peer took over its
	// MaxPrefixes stays down before the speaker lets it re-form; each
	// time it happens again the wait doubles, up to 10 minutes (or
	// PrefixLimitRetry, if longer). Default DefaultPrefixLimitRetry.
	PrefixLimitRetry time.Duration
	// Logger receives the speaker's own logs (peer up/down, errors).
	// GoBGP's logs go to it one level lower (its Info becomes Debug).
	// Default: slog.Default().
	Logger *slog.Logger
}

// Peer is one BGP neighbour: the upstream router or a route reflector.
type Peer struct {
	// Address is the neighbour's IPv4 or IPv6 address; the node needs an
	// address of the same family (Options.NextHop or NextHop6).
	Address netip.Addr
	// ASN is the neighbour's ASN; equal to Options.ASN means iBGP.
	ASN uint32
	// Port is the neighbour's TCP port. Default 179.
	Port uint16
	// Password is the TCP MD5 signature key (RFC 2385); empty for none.
	Password string
	// HoldTime is proposed in OPEN (whole seconds, 3s or more).
	// Default 9s. The session uses the smaller of both sides' values.
	// A hold time of 0 (no keepalives) cannot be had: GoBGP's API
	// takes 0 for "unset" and uses 90s.
	HoldTime time.Duration
	// Keepalive is the keepalive interval (whole seconds, less than
	// HoldTime). Default HoldTime/3.
	Keepalive time.Duration
	// Multihop is the TTL for eBGP sessions to a neighbour that is not
	// directly connected; 0 means directly connected (TTL 1).
	Multihop uint8
	// Passive waits for the neighbour to connect instead of connecting.
	Passive bool
	// MaxPrefixes is the most prefixes the neighbour may send: one more
	// and the speaker closes the session (a Cease NOTIFICATION, "maximum
	// number of prefixes reached") and keeps it down for a while (see
	// Options.PrefixLimitRetry). 1..MaxMaxPrefixes; default
	// DefaultMaxPrefixes.
	MaxPrefixes uint32
	// RestartTime, when not 0, advertises graceful restart (RFC 4724) for
	// every address family of the session with this restart time (whole
	// seconds, 1s..4095s): a peer that helps keeps this node's routes,
	// marked stale, for that long when the session ends without a
	// NOTIFICATION (StopGraceful, a crash), and drops them when the new
	// session's End-of-RIB arrives without them.
	RestartTime time.Duration
}

// MaxRestartTime is the longest restart time RFC 4724's 12 bits carry.
const MaxRestartTime = 4095 * time.Second

func (p Peer) withDefaults() Peer {
	if p.Port == 0 {
		p.Port = DefaultPort
	}
	if p.HoldTime == 0 {
		p.HoldTime = DefaultHoldTime
	}
	if p.Keepalive == 0 {
		p.Keepalive = (p.HoldTime / 3).Truncate(time.Second)
	}
	if p.MaxPrefixes == 0 {
		p.MaxPrefixes = DefaultMaxPrefixes
	}
	return p
}

// validate checks one peer, already with defaults, of a speaker with the
// given local ASN and next hops (either may be invalid: no address of
// that family).
func (p Peer) validate(localASN uint32, nextHop, nextHop6 netip.Addr) error {
	switch {
	case !p.Address.IsValid():
		return errors.New("address is missing")
	case p.Address.Is4In6():
		return fmt.Errorf("address %s is IPv4-mapped; write the IPv4 address (%s)", p.Address, p.Address.Unmap())
	case p.Address.Zone() != "" || p.Address.IsLinkLocalUnicast():
		return fmt.Errorf("address %s is link-local; peer with a global (or unique local) address of the router", p.Address)
	case p.Address.IsUnspecified() || p.Address.IsMulticast():
		return fmt.Errorf("address %s is not a unicast address", p.Address)
	case p.Address.IsLoopback():
		// Also: the speaker uses 127.0.0.0/8 itself (connect.go).
		return fmt.Errorf("address %s is a loopback address; a BGP peer must be another host", p.Address)
	case p.Address == nextHop || p.Address == nextHop6:
		return fmt.Errorf("address %s is the node's own address", p.Address)
	case p.Address.Is4() && !nextHop.IsValid():
		return fmt.Errorf("address %s is IPv4, but the node has no IPv4 address to reach it from (node.address)", p.Address)
	case p.Address.Is6() && !nextHop6.IsValid():
		return fmt.Errorf("address %s is IPv6, but the node has no IPv6 address to reach it from (node.address6)", p.Address)
	}
	if err := validateASN(p.ASN); err != nil {
		return err
	}
	if err := validateTimers(p.HoldTime, p.Keepalive); err != nil {
		return err
	}
	if len(p.Password) > maxMD5KeyLen {
		return fmt.Errorf("password is %d bytes long; TCP MD5 keys are at most %d", len(p.Password), maxMD5KeyLen)
	}
	if p.MaxPrefixes > MaxMaxPrefixes {
		return fmt.Errorf("maxPrefixes %d: want 1-%d", p.MaxPrefixes, MaxMaxPrefixes)
	}
	if p.RestartTime != 0 && (p.RestartTime < time.Second || p.RestartTime > MaxRestartTime || p.RestartTime%time.Second != 0) {
		return fmt.Errorf("restartTime %s: want whole seconds from 1s to %s, or 0 for no graceful restart", p.RestartTime, MaxRestartTime)
	}
	if p.Multihop > 0 && p.ASN == localASN {
		return fmt.Errorf("multihop %d: only eBGP sessions are TTL-limited, and this one is iBGP (peer ASN = local ASN %d)", p.Multihop, localASN)
	}
	return nil
}

func validateASN(asn uint32) error {
	switch asn {
	case 0:
		return errors.New("asn is missing (0 is reserved)")
	case asTrans:
		return fmt.Errorf("asn %d is AS_TRANS (RFC 6793), not a usable ASN", asn)
	}
	return nil
}

func validateTimers(hold, keepalive time.Duration) error {
	if hold < 3*time.Second || hold%time.Second != 0 || hold > 65535*time.Second {
		return fmt.Errorf("holdTime %s: want whole seconds from 3s to 65535s", hold)
	}
	if keepalive < time.Second || keepalive%time.Second != 0 {
		return fmt.Errorf("keepalive %s: want whole seconds, at least 1s", keepalive)
	}
	if keepalive >= hold {
		return fmt.Errorf("keepalive %s must be shorter than holdTime %s (usually a third of it)", keepalive, hold)
	}
	return nil
}

// withDefaults fills in defaults; validate must pass first for the
// result to be meaningful.
func (o Options) withDefaults() Options {
	if !o.RouterID.IsValid() && o.NextHop.IsValid() {
		o.RouterID = o.NextHop
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PrefixLimitRetry == 0 {
		o.PrefixLimitRetry = DefaultPrefixLimitRetry
	}
	peers := make([]Peer, len(o.Peers))
	passive := false
	for i, p := range o.Peers {
		peers[i] = p.withDefaults()
		passive = passive || p.Passive
	}
	o.Peers = peers
	if o.ListenPort == 0 {
		o.ListenPort = -1
		if passive {
			o.ListenPort = DefaultPort
		}
	}
	return o
}

// validate checks options that already have their defaults.
func (o Options) validate() error {
	if err := validateASN(o.ASN); err != nil {
		return err
	}
	switch {
	case !o.NextHop.IsValid() && !o.NextHop6.IsValid():
		return errors.New("nextHop (the node address) is missing")
	case o.NextHop.IsValid() && !o.NextHop.Is4():
		return fmt.Errorf("nextHop %s: want the node's IPv4 address (its IPv6 address is nextHop6)", o.NextHop)
	case o.NextHop.IsUnspecified() || o.NextHop.IsMulticast() || o.NextHop.IsLoopback():
		return fmt.Errorf("nextHop %s: must be a unicast address that peers can reach", o.NextHop)
	case o.NextHop6.IsValid() && (!o.NextHop6.Is6() || o.NextHop6.Is4In6()):
		return fmt.Errorf("nextHop6 %s: want the node's IPv6 address (its IPv4 address is nextHop)", o.NextHop6)
	case o.NextHop6.Zone() != "" || o.NextHop6.IsLinkLocalUnicast():
		return fmt.Errorf("nextHop6 %s: link-local; routers need a global (or unique local) next hop", o.NextHop6)
	case o.NextHop6.IsUnspecified() || o.NextHop6.IsMulticast() || o.NextHop6.IsLoopback():
		return fmt.Errorf("nextHop6 %s: must be a unicast address that peers can reach", o.NextHop6)
	case !o.RouterID.IsValid():
		return errors.New("routerID is missing: the node has no IPv4 address to take it from, and a BGP identifier is 32 bits (set bgp.routerID to an IPv4 address unique among the routers)")
	}
	if !o.RouterID.Is4() || o.RouterID.IsUnspecified() {
		return fmt.Errorf("routerID %s: must be a non-zero IPv4 address", o.RouterID)
	}
	if o.PrefixLimitRetry < 0 {
		return fmt.Errorf("prefixLimitRetry %s is negative", o.PrefixLimitRetry)
	}
	if o.ListenPort < -1 || o.ListenPort > 65535 {
		return fmt.Errorf("listenPort %d: want 1-65535, 0 for the default or -1 to not listen", o.ListenPort)
	}
	return validatePeers(o.Peers, o.ASN, o.NextHop, o.NextHop6, o.ListenPort)
}

// validatePeers checks a whole peer list (with defaults) for a speaker.
func validatePeers(peers []Peer, asn uint32, nextHop, nextHop6 netip.Addr, listenPort int) error {
	seen := make(map[netip.Addr]bool, len(peers))
	for i, p := range peers {
		if err := p.validate(asn, nextHop, nextHop6); err != nil {
			return fmt.Errorf("peers[%d] (%s): %w", i, p.Address, err)
		}
		if seen[p.Address] {
			return fmt.Errorf("peers[%d]: address %s is listed twice", i, p.Address)
		}
		seen[p.Address] = true
		if p.Passive && listenPort < 0 {
			return fmt.Errorf("peers[%d] (%s): passive, but the speaker does not listen (listenPort -1)", i, p.Address)
		}
	}
	return nil
}

// localAddr is the node address a session to peer is sourced from: the
// node's address of the peer's family.
func (o Options) localAddr(peer netip.Addr) netip.Addr {
	if peer.Is4() {
		return o.NextHop
	}
	return o.NextHop6
}

// nextHopFor is the next hop of an announced prefix: the node's address
// of the prefix's family (invalid if it has none).
func (o Options) nextHopFor(p netip.Prefix) netip.Addr {
	return o.localAddr(p.Addr())
}
