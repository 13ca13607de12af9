package labrun

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
)

// L2VIP is what node's status says of vip in layer-2 mode.
func L2VIP(st *api.Status, vip netip.Addr) (api.L2VIP, bool) {
	if st.L2 == nil {
		return api.L2VIP{}, false
	}
	i := slices.IndexFunc(st.L2.VIPs, func(v api.L2VIP) bool { return v.VIP == vip })
	if i < 0 {
		return api.L2VIP{}, false
	}
	return st.L2.VIPs[i], true
}

// WaitL2Owner waits until the running nodes agree on who owns vip and
// exactly that node answers for it, and returns it.
func WaitL2Owner(ctx context.Context, p lab.Plan, running []lab.Host, vip netip.Addr, timeout time.Duration) (lab.Host, error) {
	return waitL2Owner(ctx, p, running, vip, "", timeout)
}

// WaitL2OwnerIs is WaitL2Owner until that node is want: a node resumed
// after a stop waits a dead time before it takes its VIPs back, and the
// others agree on another owner meanwhile.
func WaitL2OwnerIs(ctx context.Context, p lab.Plan, running []lab.Host, vip netip.Addr, want string, timeout time.Duration) error {
	_, err := waitL2Owner(ctx, p, running, vip, want, timeout)
	return err
}

func waitL2Owner(ctx context.Context, p lab.Plan, running []lab.Host, vip netip.Addr, want string, timeout time.Duration) (lab.Host, error) {
	deadline := time.Now().Add(timeout)
	for {
		owners, answering := map[string]bool{}, []string{}
		var state []string
		var why error
		for _, n := range running {
			st, err := api.GetStatus(Socket(p, n))
			if err != nil {
				why = err
				break
			}
			v, ok := L2VIP(st, vip)
			if !ok {
				why = fmt.Errorf("%s: no layer-2 status for %s", n.Name, vip)
				break
			}
			owners[v.Owner] = true
			if v.Answering {
				answering = append(answering, n.Name)
			}
			state = append(state, fmt.Sprintf("%s: alive %v, owner %s, answering %v", n.Name, st.L2.Alive, v.Owner, v.Answering))
		}
		if why == nil && len(owners) == 1 && len(answering) == 1 && owners[answering[0]] && (want == "" || answering[0] == want) {
			return NodeNamed(p, answering[0]), nil
		}
		if why == nil {
			why = errors.New(strings.Join(state, "; "))
		}
		if time.Now().After(deadline) {
			if want != "" {
				return lab.Host{}, fmt.Errorf("%s does not own %s, answering alone and agreed by the others, after %s: %w", want, vip, timeout, why)
			}
			return lab.Host{}, fmt.Errorf("the nodes do not agree on one owner of %s, answering alone, after %s: %w", vip, timeout, why)
		}
		select {
		case <-ctx.Done():
			return lab.Host{}, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// NodeNamed is the node of p named name (a Host with that name alone if
// there is none).
func NodeNamed(p lab.Plan, name string) lab.Host {
	i := slices.IndexFunc(p.Nodes, func(h lab.Host) bool { return h.Name == name })
	if i < 0 {
		return lab.Host{Name: name}
	}
	return p.Nodes[i]
}

// NeighMAC is the MAC address host h's neighbour table holds for addr
// ("" without an entry): what `ip neigh` (`ip -6 neigh` for an IPv6
// addr) shows in its namespace.
func NeighMAC(h lab.Host, addr netip.Addr) (string, error) {
	var mac string
	err := netns.Do(h.Namespace, func() error {
		l, err := netlink.LinkByName(h.Interface)
		if err != nil {
			return err
		}
		family := netlink.FAMILY_V4
		if addr.Is6() {
			family = netlink.FAMILY_V6
		}
		ns, err := netlink.NeighList(l.Attrs().Index, family)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == addr && len(n.HardwareAddr) == 6 {
				mac = n.HardwareAddr.String()
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: neighbour table: %w", h.Name, err)
	}
	return mac, nil
}

// ARPSeen is an ARP frame for the probed address: an answer, or a
// gratuitous announcement.
type ARPSeen struct {
	At  time.Time
	MAC string // the sender's hardware address
	// Gratuitous: an unsolicited announcement (a request for the
	// address from the address), not an answer.
	Gratuitous bool
}

// ARPSocket opens, in host h's namespace, a packet socket that sends
// and receives the ARP frames of its interface, which it returns too.
// The caller closes the socket.
func ARPSocket(h lab.Host) (int, *net.Interface, error) {
	var fd int
	var ifc *net.Interface
	err := netns.Do(h.Namespace, func() error {
		var err error
		if ifc, err = net.InterfaceByName(h.Interface); err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: ARP socket: %w", h.Name, err)
	}
	return fd, ifc, nil
}

// ARPProbe asks for addr by ARP from host h (its interface, its address)
// every `every` until ctx ends, and records every ARP frame from addr it
// sees meanwhile, answers and gratuitous ones. It returns them in the
// order seen, with the number of requests sent.
func ARPProbe(ctx context.Context, h lab.Host, addr netip.Addr, every time.Duration) ([]ARPSeen, int, error) {
	var (
		seen []ARPSeen
		sent int
	)
	fd, ifc, err := ARPSocket(h)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(10 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, 0, err
	}
	req := arpRequest(ifc.HardwareAddr, h.Addr, addr)
	to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Protocol: htons(unix.ETH_P_ARP), Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for ctx.Err() == nil {
			if err := unix.Sendto(fd, req, 0, to); err != nil && sendErr == nil {
				sendErr = err
			}
			sent++
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	buf := make([]byte, 128)
	want := addr.As4()
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			wg.Wait()
			return seen, sent, err
		}
		at := time.Now()
		f := buf[:n]
		if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_ARP || [4]byte(f[28:32]) != want {
			continue
		}
		op := binary.BigEndian.Uint16(f[20:])
		garp := op == 1 && [4]byte(f[38:42]) == want
		if op != 2 && !garp {
			continue
		}
		seen = append(seen, ARPSeen{At: at, MAC: net.HardwareAddr(f[22:28]).String(), Gratuitous: garp})
	}
	wg.Wait()
	return seen, sent, sendErr
}

func arpRequest(mac net.HardwareAddr, from, target netip.Addr) []byte {
	s, t := from.As4(), target.As4()
	b := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	b = append(b, mac...)
	b = append(b, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1)
	b = append(append(b, mac...), s[:]...)
	b = append(append(b, 0, 0, 0, 0, 0, 0), t[:]...)
	return b
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ARPRoundTrips asks for addr by ARP from host h n times, one at a time,
// and returns how long each answer took; a request unanswered within
// timeout counts as lost.
func ARPRoundTrips(ctx context.Context, h lab.Host, addr netip.Addr, n int, timeout time.Duration) (rtts []time.Duration, lost int, err error) {
	fd, ifc, err := ARPSocket(h)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(fd)
	req := arpRequest(ifc.HardwareAddr, h.Addr, addr)
	to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Protocol: htons(unix.ETH_P_ARP), Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	want := addr.As4()
	buf := make([]byte, 128)
	for range n {
		if err := ctx.Err(); err != nil {
			return rtts, lost, err
		}
		start := time.Now()
		if err := unix.Sendto(fd, req, 0, to); err != nil {
			return rtts, lost, fmt.Errorf("send an ARP request: %w", err)
		}
		answered := false
		for !answered {
			left := timeout - time.Since(start)
			if left <= 0 {
				break
			}
			tv := unix.NsecToTimeval(int64(left))
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return rtts, lost, err
			}
			m, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, syscall.EINTR) {
					continue
				}
				return rtts, lost, err
			}
			f := buf[:m]
			if len(f) >= 42 && binary.BigEndian.Uint16(f[20:]) == 2 && [4]byte(f[28:32]) == want {
				rtts = append(rtts, time.Since(start))
				answered = true
			}
		}
		if !answered {
			lost++
		}
	}
	return rtts, lost, nil
}

// L2Failover is one failover of a VIP in layer-2 mode, as measured: every
// time from the signal that stopped the owner's agent.
type L2Failover struct {
	Signal   string `json:"signal"`
	OldOwner string `json:"oldOwner"`
	NewOwner string `json:"newOwner"`
	// Answering: the new owner's status says it answers for the VIP.
	Answering time.Duration `json:"answeringNs"`
	// FirstARP: the first ARP frame for the VIP from the new owner's MAC
	// (an answer to the probe, or its gratuitous ARP) seen by the first
	// client: from then on a client sends to the new owner.
	FirstARP time.Duration `json:"firstARPNs"`
	// OldLastARP: the old owner's last ARP answer for the VIP after the
	// signal; -1 when it gave none.
	OldLastARP time.Duration `json:"oldLastARPNs"`
	// Overlap counts the old owner's answers after the new owner's first
	// frame: both answering at once.
	Overlap int `json:"overlap"`
	// ClientsMoved: each client's neighbour entry for the VIP holds the
	// new owner's MAC.
	ClientsMoved []time.Duration `json:"clientsMovedNs"`
	Conns        int             `json:"persistent"`
	Broken       int             `json:"broken"`
	// NewRequests and NewFailed count the new connections streamed in
	// from the first client meanwhile.
	NewRequests int `json:"newRequests"`
	NewFailed   int `json:"newFailed"`
	// FirstBroken is the first broken persistent connection's error.
	FirstBroken string `json:"firstBroken,omitempty"`
}

// RunL2Failover stops owner's agent with sig while conns persistent
// connections to web (spread over the clients) stay open, new ones
// stream in from the first client every 10 ms and, for an IPv4 VIP,
// that client asks for the VIP by ARP every 10 ms (no probe for an IPv6
// VIP: FirstARP and OldLastARP stay -1), and measures how the VIP moves
// to another of the running nodes. After SIGTERM it waits for the agent to exit;
// after SIGSTOP the caller resumes it.
func RunL2Failover(ctx context.Context, p lab.Plan, web Service, running []lab.Host, owner lab.Host, sig syscall.Signal, conns int) (r L2Failover, err error) {
	r = L2Failover{Signal: unix.SignalName(sig), OldOwner: owner.Name, Conns: conns, OldLastARP: -1}
	var open []*HTTPConn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := range conns {
		client := p.Clients[i%len(p.Clients)]
		c, err := DialHTTP(ctx, client.Namespace, web.Target())
		if err != nil {
			return r, err
		}
		open = append(open, c)
		if _, err := c.Get(ctx, false); err != nil {
			return r, fmt.Errorf("persistent connection %d from %s, before the failover: %w", i, client.Name, err)
		}
	}
	st, err := api.GetStatus(Socket(p, owner))
	if err != nil || st.L2 == nil {
		return r, fmt.Errorf("%s: layer-2 status: %v", owner.Name, err)
	}
	oldMAC := st.L2.MAC
	pid, err := AgentPID(p, owner)
	if err != nil {
		return r, err
	}

	side, stopSide := context.WithCancel(ctx)
	defer stopSide()
	var wg sync.WaitGroup
	var attempts []Attempt
	var seen []ARPSeen
	var sideErr [2]error
	wg.Go(func() {
		attempts, sideErr[0] = Stream(side, p.Clients[0].Namespace, web.Target(), 10*time.Millisecond, 2*time.Second)
	})
	if web.VIP.Is4() {
		wg.Go(func() { seen, _, sideErr[1] = ARPProbe(side, p.Clients[0], web.VIP, 10*time.Millisecond) })
	}
	stopAll := func() error {
		stopSide()
		wg.Wait()
		return errors.Join(sideErr[:]...)
	}
	defer stopAll()
	time.Sleep(200 * time.Millisecond)

	others := slices.DeleteFunc(slices.Clone(running), func(h lab.Host) bool { return h.Name == owner.Name })
	start := time.Now()
	if err := syscall.Kill(pid, sig); err != nil {
		return r, fmt.Errorf("%s: signal the agent: %w", owner.Name, err)
	}
	newMAC := ""
	moved := make([]time.Duration, len(p.Clients))
	deadline := start.Add(10 * time.Second)
	for {
		if newMAC == "" {
			for _, n := range others {
				st, err := api.GetStatus(Socket(p, n))
				if err != nil {
					return r, err
				}
				if v, ok := L2VIP(st, web.VIP); ok && v.Answering {
					r.NewOwner, r.Answering, newMAC = n.Name, time.Since(start), st.L2.MAC
				}
			}
		}
		done := newMAC != ""
		for i, c := range p.Clients {
			if moved[i] != 0 || newMAC == "" {
				continue
			}
			mac, err := NeighMAC(c, web.VIP)
			if err != nil {
				return r, err
			}
			if mac == newMAC {
				moved[i] = time.Since(start)
			}
			done = done && moved[i] != 0
		}
		done = done && !slices.Contains(moved, 0)
		if done {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("10s after %s of %s: new owner %q (MAC %s); the clients' entries moved after %v", r.Signal, owner.Name, r.NewOwner, newMAC, moved)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.ClientsMoved = moved
	if sig == syscall.SIGTERM {
		if err := WaitExit(ctx, pid, 5*time.Second); err != nil {
			return r, err
		}
	}
	// Traffic for a while through the new owner, then every persistent
	// connection asks once more.
	time.Sleep(500 * time.Millisecond)
	if err := stopAll(); err != nil {
		return r, err
	}
	for _, a := range attempts {
		r.NewRequests++
		if a.Err != nil {
			r.NewFailed++
		}
	}
	firstNew := time.Time{}
	for _, s := range seen {
		if s.MAC == newMAC && firstNew.IsZero() {
			firstNew, r.FirstARP = s.At, s.At.Sub(start)
		}
	}
	for _, s := range seen {
		if s.MAC == oldMAC && !s.Gratuitous && s.At.After(start) {
			r.OldLastARP = s.At.Sub(start)
			if !firstNew.IsZero() && s.At.After(firstNew) {
				r.Overlap++
			}
		}
	}
	if firstNew.IsZero() {
		r.FirstARP = -1
	}
	for _, c := range open {
		if _, err := c.Get(ctx, true); err != nil {
			r.Broken++
			if r.FirstBroken == "" {
				r.FirstBroken = fmt.Sprintf("%v: %v", c.LocalAddr(), err)
			}
		}
	}
	return r, nil
}

// String sums the failover up on one line.
func (r L2Failover) String() string {
	ms := func(d time.Duration) string {
		if d < 0 {
			return "none"
		}
		return d.Round(time.Millisecond).String()
	}
	moved := make([]string, len(r.ClientsMoved))
	for i, d := range r.ClientsMoved {
		moved[i] = ms(d)
	}
	return fmt.Sprintf("%s of %s: %s answers after %s, its first ARP frame after %s (the old owner's last answer: %s, %d after the new one's first); the clients' neighbour entries moved after %s; %d of %d persistent connections broken; %d of %d new ones failed",
		r.Signal, r.OldOwner, r.NewOwner, ms(r.Answering), ms(r.FirstARP), ms(r.OldLastARP), r.Overlap, strings.Join(moved, ", "), r.Broken, r.Conns, r.NewFailed, r.NewRequests)
}
