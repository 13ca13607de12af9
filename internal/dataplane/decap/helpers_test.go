package decap

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/testbed/testenv"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

func requirePrivileges(t testing.TB) {
	testenv.RequireRoot(t, "data plane tests (BPF, network namespaces)")
}

var nsCounter atomic.Int32

var ipcmd = xdptest.IP

// The fixture namespace (xdptest.NS), its interfaces prepared as the LB's
// Load prepares a node's: chaining's FIB lookups need forwarding on too.
type fixtureNS = xdptest.NS

func newFixtureNS(t testing.TB) *fixtureNS { return xdptest.NewNS(t, lb.PrepareInterface) }

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

func testPinPath(t *testing.T) string {
	t.Helper()
	p := filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-%d-%d", os.Getpid(), nsCounter.Add(1)))
	t.Cleanup(func() {
		os.RemoveAll(p)
		os.Remove(bpfobj.LockFile(p))
	})
	return p
}

// xdpProgID is the XDP program attached to ifname in namespace ns (0:
// none).
func xdpProgID(t *testing.T, ns, ifname string) uint32 {
	t.Helper()
	id, err := xdptest.AttachedProgram(ns, ifname)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// be32 is an IPv4 address as a big-endian number (0 for none), as a GUE
// hint carries it.
func be32(a netip.Addr) uint32 {
	if !a.Is4() {
		return 0
	}
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func tcpTo(dst netip.Addr, dport uint16) pkt {
	return pkt{Src: fxClient, Dst: dst, Sport: 40000, Dport: dport, Proto: 6, DF: true, Payload: []byte("GET / HTTP/1.1\r\n\r\n")}
}
