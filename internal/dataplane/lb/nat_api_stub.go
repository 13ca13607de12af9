// Stub until h23-dp merges; the lead deletes this file.

package lb

import (
	"errors"
	"net/netip"
	"time"
)

var errNATStub = errors.New("nat: not in this data plane yet")

// Placeholder values: the real ones come from enum xlb_encap via wire.
const (
	EncapNAT  Encap = 250 // full NAT: dst -> backend addr:port, src -> NATConfig.Address:allocated port
	EncapDNAT Encap = 251 // dst -> backend addr:port only; the client's address is kept
)

const DefaultNATSessions = 262144

// NATConfig is node-wide and hot: SetNAT may be called at start and on every reload.
type NATConfig struct {
	Address          netip.Addr
	PortMin, PortMax uint16
	TCPSyn           time.Duration
	TCPEstablished   time.Duration
	TCPClosing       time.Duration
	UDP              time.Duration
}

func (d *Dataplane) SetNAT(c NATConfig) error { return errNATStub }

// NATCounters are the node-wide NAT counters and gauges.
type NATCounters struct {
	Sessions       uint64
	Embryonic      uint64
	Created        uint64
	AllocFailures  uint64
	Expired        uint64
	ReverseMisses  uint64
	NoReply        uint64
	Fragments      uint64
	ICMPTranslated uint64
}

func (d *Dataplane) NATCounters() (NATCounters, error) { return NATCounters{}, errNATStub }

// Session is one NAT session, for `xlb status --sessions`.
type Session struct {
	Protocol  uint8
	Client    netip.AddrPort
	VIP       netip.AddrPort
	Backend   netip.AddrPort
	BackendID uint32
	Source    netip.AddrPort
	State     string
	Replied   bool
	Idle      time.Duration
}

func (d *Dataplane) Sessions(vip netip.Addr, port uint16, proto uint8, max int) ([]Session, error) {
	return nil, errNATStub
}

func (d *Dataplane) EndBackendSessions(id uint32) (int, error) { return 0, errNATStub }

func (d *Dataplane) ExpireSessions() (int, error) { return 0, errNATStub }
