package bgp

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// fakePeer accepts one connection on loopback, reads the OPEN, answers
// with the given messages and reports what it read.
type fakePeerResult struct {
	open  *gobgp.BGPOpen
	after *gobgp.BGPMessage // what the probe sent after our answer, if anything
	err   error
}

func fakePeer(t *testing.T, answer ...*gobgp.BGPMessage) (netip.AddrPort, <-chan fakePeerResult) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	res := make(chan fakePeerResult, 1)
	go func() {
		var r fakePeerResult
		defer func() { res <- r }()
		c, err := l.Accept()
		if err != nil {
			r.err = err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		m, err := readMessage(c)
		if err != nil {
			r.err = err
			return
		}
		r.open, _ = m.Body.(*gobgp.BGPOpen)
		for _, a := range answer {
			b, _ := a.Serialize()
			if _, err := c.Write(b); err != nil {
				r.err = err
				return
			}
		}
		if len(answer) > 0 {
			r.after, _ = readMessage(c)
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String()), res
}

func TestProbeOpen(t *testing.T) {
	routerID := mustAddr("10.0.0.1")
	peerOpen, err := gobgp.NewBGPOpenMessage(65000, 90, mustAddr("10.0.0.2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		localASN   uint32
		answer     []*gobgp.BGPMessage
		want       string
		wantErr    bool
		wantCease  bool
		wantOpenAS uint16
	}{
		{
			name:       "rejected",
			localASN:   65001,
			answer:     []*gobgp.BGPMessage{peerOpen, gobgp.NewBGPNotificationMessage(2, 2, []byte{0xfd, 0xe9})},
			want:       "OPEN message error / bad peer AS (our OPEN carries AS 65001)",
			wantOpenAS: 65001,
		},
		{
			name:       "rejected without OPEN, 4-byte ASN",
			localASN:   4200000000,
			answer:     []*gobgp.BGPMessage{gobgp.NewBGPNotificationMessage(2, 6, nil)},
			want:       "OPEN message error / unacceptable hold time",
			wantOpenAS: asTrans,
		},
		{
			name:       "accepted",
			localASN:   65001,
			answer:     []*gobgp.BGPMessage{peerOpen, gobgp.NewBGPKeepAliveMessage()},
			wantCease:  true,
			wantOpenAS: 65001,
		},
		{
			name:       "closed",
			localASN:   65001,
			wantErr:    true,
			wantOpenAS: 65001,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ap, res := fakePeer(t, tc.answer...)
			p := Peer{Address: ap.Addr(), Port: ap.Port(), ASN: 65000, HoldTime: 9 * time.Second}
			got, err := probeOpen(context.Background(), mustAddr("127.0.0.1"), p, tc.localASN, routerID, true, false)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("probeOpen = %q, %v; want %q (error: %v)", got, err, tc.want, tc.wantErr)
			}
			r := <-res
			if r.open == nil {
				t.Fatalf("peer got no OPEN (%v)", r.err)
			}
			if r.open.MyAS != tc.wantOpenAS || r.open.HoldTime != 9 || r.open.ID != routerID {
				t.Errorf("OPEN: AS %d hold %d id %s", r.open.MyAS, r.open.HoldTime, r.open.ID)
			}
			var as4 uint32
			for _, op := range r.open.OptParams {
				if c, ok := op.(*gobgp.OptionParameterCapability); ok {
					for _, cp := range c.Capability {
						if f, ok := cp.(*gobgp.CapFourOctetASNumber); ok {
							as4 = f.CapValue
						}
					}
				}
			}
			if as4 != tc.localASN {
				t.Errorf("OPEN four-octet AS capability = %d, want %d", as4, tc.localASN)
			}
			cease := r.after != nil && r.after.Header.Type == gobgp.BGP_MSG_NOTIFICATION
			if cease != tc.wantCease {
				t.Errorf("probe closed with NOTIFICATION = %v, want %v", cease, tc.wantCease)
			}
		})
	}
}
