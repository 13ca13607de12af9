package lb

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/xlbproject/xlb/testbed/testenv"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

func requirePrivileges(t testing.TB) {
	testenv.RequireRoot(t, "data plane tests (BPF, network namespaces)")
}

var nsCounter atomic.Int32

var ipcmd = xdptest.IP

// The fixture namespace (xdptest.NS), its interfaces prepared as Load
// prepares a node's.
type fixtureNS = xdptest.NS

func newFixtureNS(t testing.TB) *fixtureNS { return xdptest.NewNS(t, PrepareInterface) }

// Addresses of the fixture namespace.
var (
	fxNode      = xdptest.Node
	fxRouterMAC = xdptest.RouterMAC
	fxOtherMAC  = xdptest.OtherMAC
	fxClient    = xdptest.Client
	fxVIP       = xdptest.VIP
	fxBackend   = xdptest.Backend
	fxRedirBE   = xdptest.RedirBE
	fxNoNeighBE = xdptest.NoNeighBE
	fxSmallMTU  = xdptest.SmallMTU
	fxNoRouteBE = xdptest.NoRouteBE
)

// Verdicts.
const (
	xdpAborted  = xdptest.Aborted
	xdpDrop     = xdptest.Drop
	xdpPass     = xdptest.Pass
	xdpTX       = xdptest.TX
	xdpRedirect = xdptest.Redirect
)

var verdictNames = xdptest.VerdictNames

// pkt describes a test packet.
type pkt = xdptest.Packet

var (
	srcMAC = xdptest.SrcMAC
	csum   = xdptest.Csum
)

// servicesOf, backendsOf and ownersOf are what d.Installed lists.
func servicesOf(d *Dataplane) ([]Service, error) {
	in, err := d.Installed()
	return in.Services, err
}

func backendsOf(d *Dataplane) (map[uint32]netip.Addr, error) {
	in, err := d.Installed()
	return in.Backends, err
}

func ownersOf(d *Dataplane) (map[uint32]uint32, error) {
	in, err := d.Installed()
	return in.Owners, err
}

// apOf is backend address a as UpsertBackend takes it, for services that
// ignore the port (DSR) or take the service's own (port 0).
func apOf(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, 0) }
