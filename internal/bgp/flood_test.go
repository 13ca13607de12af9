package bgp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// floodPeer is a minimal eBGP speaker for the tests: it accepts the
// speaker's sessions, announces prefixes /32s from floodBase on, as many
// to an UPDATE as fit, as fast as the speaker reads them and, with churn,
// keeps announcing them again with another MED until told to stop. It
// notes every NOTIFICATION the speaker sends it.
type floodPeer struct {
	t        testing.TB
	addr     netip.Addr
	asn      uint32
	prefixes int
	ln       net.Listener

	mu       sync.Mutex
	churn    bool
	notes    []string // NOTIFICATIONs received, in words
	sessions int      // sessions established
	sentAll  int      // sessions in which every prefix was sent once
	conn     net.Conn // the current session's connection
	closed   bool
}

// floodBase is the first prefix a floodPeer announces.
var floodBase = netip.MustParseAddr("20.0.0.0")

// floodPerUpdate is how many /32s an UPDATE carries: five bytes each,
// within the 4096 bytes of a message with the attributes below.
const floodPerUpdate = 800

// startFloodPeer listens on addr:179 in namespace ns as AS asn and
// announces n prefixes in every session.
func startFloodPeer(t testing.TB, ns string, addr netip.Addr, asn uint32, n int) *floodPeer {
	t.Helper()
	runner := inNamespace(t, ns)
	defer runner.Close()
	f := &floodPeer{t: t, addr: addr, asn: asn, prefixes: n}
	err := runner.Do(func() error {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(addr, 179).String())
		f.ln = ln
		return err
	})
	if err != nil {
		t.Fatalf("flood peer %s: listen: %v", addr, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := f.ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			if f.conn != nil {
				f.conn.Close() // one session at a time
			}
			f.conn = c
			f.mu.Unlock()
			go f.session(c)
		}
	}()
	t.Cleanup(func() {
		f.mu.Lock()
		f.closed = true
		if f.conn != nil {
			f.conn.Close()
		}
		f.mu.Unlock()
		f.ln.Close()
		<-done
	})
	return f
}

// setChurn starts or stops re-announcing the prefixes after the first
// round.
func (f *floodPeer) setChurn(on bool) {
	f.mu.Lock()
	f.churn = on
	f.mu.Unlock()
}

func (f *floodPeer) notifications() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.notes...)
}

func (f *floodPeer) counts() (sessions, sentAll int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions, f.sentAll
}

func (f *floodPeer) session(c net.Conn) {
	defer c.Close()
	open, err := openMessage(f.asn, 9*time.Second, f.addr, true, false)
	if err != nil {
		f.t.Errorf("flood peer: %v", err)
		return
	}
	if _, err := c.Write(open); err != nil {
		return
	}
	m, err := readMessage(c)
	if err != nil || m.Header.Type != gobgp.BGP_MSG_OPEN {
		return
	}
	if !f.write(c, keepalive) {
		return
	}
	// The speaker's KEEPALIVE (or its NOTIFICATION) answers our OPEN.
	up := make(chan bool, 1)
	go func() {
		first := true
		for {
			m, err := readMessage(c)
			if err != nil {
				if first {
					up <- false
				}
				return
			}
			if n, ok := m.Body.(*gobgp.BGPNotification); ok {
				f.mu.Lock()
				f.notes = append(f.notes, notificationText(n.ErrorCode, n.ErrorSubcode))
				f.mu.Unlock()
			}
			if first {
				first = false
				up <- m.Header.Type == gobgp.BGP_MSG_KEEPALIVE
			}
		}
	}()
	if !<-up {
		return
	}
	f.mu.Lock()
	f.sessions++
	f.mu.Unlock()

	ka := time.NewTicker(3 * time.Second)
	defer ka.Stop()
	for round := uint32(0); ; round++ {
		for first := 0; first < f.prefixes; first += floodPerUpdate {
			select {
			case <-ka.C:
				if !f.write(c, keepalive) {
					return
				}
			default:
			}
			msg, err := f.update(first, min(f.prefixes-first, floodPerUpdate), round)
			if err != nil {
				f.t.Errorf("flood peer: %v", err)
				return
			}
			if !f.write(c, msg) {
				return
			}
		}
		f.mu.Lock()
		if round == 0 {
			f.sentAll++
		}
		churn := f.churn
		f.mu.Unlock()
		for !churn {
			<-ka.C
			if !f.write(c, keepalive) {
				return
			}
			f.mu.Lock()
			churn = f.churn
			f.mu.Unlock()
		}
	}
}

var keepalive = func() []byte {
	b, _ := gobgp.NewBGPKeepAliveMessage().Serialize()
	return b
}()

// write sends msg; false once the session is gone.
func (f *floodPeer) write(c net.Conn, msg []byte) bool {
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err := c.Write(msg)
	return err == nil
}

// update announces n prefixes from the first-th on, with MED round.
func (f *floodPeer) update(first, n int, round uint32) ([]byte, error) {
	nh, err := gobgp.NewPathAttributeNextHop(f.addr)
	if err != nil {
		return nil, err
	}
	attrs := []gobgp.PathAttributeInterface{
		gobgp.NewPathAttributeOrigin(gobgp.BGP_ORIGIN_ATTR_TYPE_IGP),
		gobgp.NewPathAttributeAsPath([]gobgp.AsPathParamInterface{gobgp.NewAs4PathParam(gobgp.BGP_ASPATH_ATTR_TYPE_SEQ, []uint32{f.asn})}),
		nh,
		gobgp.NewPathAttributeMultiExitDisc(round),
	}
	nlri := make([]gobgp.PathNLRI, n)
	for i := range nlri {
		p, err := gobgp.NewIPAddrPrefix(floodPrefix(first + i))
		if err != nil {
			return nil, err
		}
		nlri[i] = gobgp.PathNLRI{NLRI: p}
	}
	b, err := gobgp.NewBGPUpdateMessage(nil, attrs, nlri).Serialize()
	if err != nil {
		return nil, err
	}
	if len(b) > gobgp.BGP_MAX_MESSAGE_LENGTH {
		return nil, errors.New("UPDATE too long")
	}
	return b, nil
}

// floodPrefix is the i-th prefix a floodPeer announces.
func floodPrefix(i int) netip.Prefix {
	b := floodBase.As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(i)
	binary.BigEndian.PutUint32(b[:], v)
	return netip.PrefixFrom(netip.AddrFrom4(b), 32)
}

func (f *floodPeer) String() string { return fmt.Sprintf("flood peer %s (AS %d)", f.addr, f.asn) }
