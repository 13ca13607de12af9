package main

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// userResponder answers ARP requests for addr from node h's namespace
// with an AF_PACKET socket, as a user-space responder in the agent would:
// the alternative to XDP and to the kernel that decision 0009 measures.
// It runs until ctx ends; wait then returns how many it answered.
func userResponder(ctx context.Context, h lab.Host, addr netip.Addr) (wait func() (int, error), err error) {
	fd, ifc, err := labrun.ARPSocket(h)
	if err != nil {
		return nil, err
	}
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, err
	}
	n := 0
	done := make(chan error, 1)
	want := addr.As4()
	go func() {
		defer unix.Close(fd)
		buf := make([]byte, 128)
		for ctx.Err() == nil {
			m, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				done <- err
				return
			}
			f := buf[:m]
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			if len(f) < 42 || binary.BigEndian.Uint16(f[20:]) != 1 || [4]byte(f[38:42]) != want || f[22]&1 != 0 {
				continue
			}
			reply := make([]byte, 42)
			copy(reply[0:], f[22:28])
			copy(reply[6:], ifc.HardwareAddr)
			copy(reply[12:], []byte{0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2})
			copy(reply[22:], ifc.HardwareAddr)
			copy(reply[28:], want[:])
			copy(reply[32:], f[22:32])
			to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Protocol: htons(unix.ETH_P_ARP), Halen: 6}
			copy(to.Addr[:], f[22:28])
			if err := unix.Sendto(fd, reply, 0, to); err != nil {
				done <- err
				return
			}
			n++
		}
		done <- nil
	}()
	return func() (int, error) { err := <-done; return n, err }, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
