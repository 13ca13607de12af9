// Package natfloor attaches the lab's NAT floor (bpf/bench_natfloor.c)
// to an LB node of bench/httpbench: a stateless XDP rewrite between one
// client and up to eight backends, the least any NAT node can do to the
// lab's HTTP flows. Its requests per second bound what a NAT path of
// the lab can reach, whatever its program: the rest of the path (client,
// router, backends, veths) is the same. It is a benchmark's yardstick,
// not a load balancer: it trusts the lab's single client to keep its
// ports unique.
package natfloor

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf/link"

	"github.com/xlbproject/xlb/testbed/netns"
)

//go:generate go tool bpf2go -tags linux -target bpfel -type natfloor_cfg floor ../../../bpf/bench_natfloor.c -- -O2 -mcpu=v3 -g -Wall -Werror -I../../../bpf -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=../../../bpf=bpf

// MaxBackends is the most backends the floor spreads over.
const MaxBackends = 8

// Config is what the floor rewrites: the client's segments to VIP:Port
// go to Backends[Pick(client port, len(Backends))]:BackendPort from Node
// (the client's port kept), and the backends' replies to Node back from
// VIP:Port to Client.
type Config struct {
	VIP, Node, Client netip.Addr
	Port, BackendPort uint16
	Backends          []netip.Addr
}

// Pick is the backend (an index below n) of a client's port, as the
// program picks it: a multiplicative hash, as the kernel gives connect()
// even ports only.
func Pick(port uint16, n int) int { return int((uint32(port)*0x9e3779b1)>>16) % n }

// Floor is the program attached to one interface.
type Floor struct {
	objs floorObjects
	l    link.Link
}

// Attach loads the floor and attaches it to interface ifname in network
// namespace ns (native XDP), configured with c. Close detaches it.
func Attach(ns, ifname string, c Config) (*Floor, error) {
	f := &Floor{}
	if err := loadFloorObjects(&f.objs, nil); err != nil {
		return nil, fmt.Errorf("load the NAT floor: %w", err)
	}
	if err := f.Configure(c); err != nil {
		f.objs.Close()
		return nil, err
	}
	err := netns.Do(ns, func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("interface %q: %w", ifname, err)
		}
		f.l, err = link.AttachXDP(link.XDPOptions{Program: f.objs.Natfloor, Interface: iface.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach the NAT floor to %s in %s: %w", ifname, ns, err)
		}
		return nil
	})
	if err != nil {
		f.objs.Close()
		return nil, err
	}
	return f, nil
}

// Configure replaces the floor's configuration; packets in flight see the
// old one or the new one.
func (f *Floor) Configure(c Config) error {
	v, err := c.value()
	if err != nil {
		return err
	}
	if err := f.objs.NatfloorConfig.Put(uint32(0), v); err != nil {
		return fmt.Errorf("configure the NAT floor: %w", err)
	}
	return nil
}

// Close detaches the floor and frees it.
func (f *Floor) Close() error {
	var err error
	if f.l != nil {
		err = f.l.Close()
	}
	f.objs.Close()
	return err
}

func (c Config) value() (floorNatfloorCfg, error) {
	var v floorNatfloorCfg
	if len(c.Backends) == 0 || len(c.Backends) > MaxBackends {
		return v, fmt.Errorf("NAT floor: %d backends, want 1 to %d", len(c.Backends), MaxBackends)
	}
	for _, a := range append([]netip.Addr{c.VIP, c.Node, c.Client}, c.Backends...) {
		if !a.Is4() {
			return v, fmt.Errorf("NAT floor: address %v is not IPv4 (the floor is IPv4 only)", a)
		}
	}
	be32 := func(a netip.Addr) uint32 {
		b := a.As4()
		return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	}
	be16 := func(p uint16) uint16 { return p<<8 | p>>8 }
	v.Vip, v.Node, v.Client = be32(c.VIP), be32(c.Node), be32(c.Client)
	v.Vport, v.Bport = be16(c.Port), be16(c.BackendPort)
	v.N = uint32(len(c.Backends))
	for i, b := range c.Backends {
		v.Backends[i] = be32(b)
	}
	return v, nil
}
