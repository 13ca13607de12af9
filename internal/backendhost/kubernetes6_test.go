package backendhost

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// The IPv6 twin of k8sTopology, for IPv6 pods:
//
//	client ── c0 ═ l0 ── lb ── l1 ═ n0 ── node ─┬─ hp1 ═ eth0 ── pod1
//	fd00:1::2     (xlb XDP on l0)   fd00:2::2   └─ hp2 ═ eth0 ── pod2
//
// The LB is an IPv6-only node (lb.Options.NodeAddr6 alone) that tunnels
// to the pods' addresses; the node routes each pod's /128 over its veth,
// and the pods' default route is fe80::1, which every hp<k> holds, as
// Calico-style CNIs with host routing give IPv6 pods a link-local
// gateway on the host's end of their veth.
var (
	k6VIP1   = netip.MustParseAddr("fd00:99::1")
	k6VIP2   = netip.MustParseAddr("fd00:99::2")
	k6Pods   = []netip.Addr{netip.MustParseAddr("fd00:244:1::2"), netip.MustParseAddr("fd00:244:1::3")}
	k6Client = netip.MustParseAddr("fd00:1::2")
	k6LBAddr = netip.MustParseAddr("fd00:2::1")
)

// sysctl6In writes IPv6 sysctls (paths under /proc/sys/net/ipv6) in ns.
func sysctl6In(t *testing.T, ns string, kv map[string]string) {
	t.Helper()
	err := netns.Do(ns, func() error {
		for k, v := range kv {
			if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv6", k), []byte(v), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", ns, err)
	}
}

func newK8sTopology6(t *testing.T) *k8sTopology {
	t.Helper()
	pid := os.Getpid()
	name := func(role string) string { return fmt.Sprintf("xlbk6-%d-%s", pid, role) }
	k := &k8sTopology{
		client: name("client"), lb: name("lb"), node: name("node"),
		pods:    []string{name("pod1"), name("pod2")},
		lbPin:   filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-k6-%d-lb", pid)),
		nodePin: filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-k6-%d-node", pid)),
	}
	for _, ns := range append([]string{k.client, k.lb, k.node}, k.pods...) {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
		// Every address is unique by plan: no duplicate address
		// detection to wait for, link-local ones included.
		sysctl6In(t, ns, map[string]string{"conf/all/accept_dad": "0", "conf/default/accept_dad": "0"})
	}
	sh(t, "ip", "-n", k.client, "link", "add", "c0", "type", "veth", "peer", "name", "l0", "netns", k.lb)
	sh(t, "ip", "-n", k.lb, "link", "add", "l1", "type", "veth", "peer", "name", "n0", "netns", k.node)
	sh(t, "ip", "-n", k.client, "addr", "add", k6Client.String()+"/64", "dev", "c0", "nodad")
	sh(t, "ip", "-n", k.client, "link", "set", "c0", "up")
	sh(t, "ip", "-n", k.client, "-6", "route", "add", "default", "via", "fd00:1::1")
	sh(t, "ip", "netns", "exec", k.client, "ethtool", "-K", "c0", "tx", "off")

	sh(t, "ip", "-n", k.lb, "addr", "add", "fd00:1::1/64", "dev", "l0", "nodad")
	sh(t, "ip", "-n", k.lb, "addr", "add", k6LBAddr.String()+"/64", "dev", "l1", "nodad")
	for _, l := range []string{"l0", "l1"} {
		sh(t, "ip", "-n", k.lb, "link", "set", l, "up")
	}
	sh(t, "ip", "-n", k.lb, "-6", "route", "add", "fd00:244:1::/64", "via", "fd00:2::2")
	sysctl6In(t, k.lb, map[string]string{"conf/all/forwarding": "1"})

	sh(t, "ip", "-n", k.node, "addr", "add", "fd00:2::2/64", "dev", "n0", "nodad")
	sh(t, "ip", "-n", k.node, "link", "set", "n0", "up")
	sh(t, "ip", "-n", k.node, "-6", "route", "add", "default", "via", "fd00:2::1")
	sysctlIn(t, k.node, map[string]string{"ip_forward": "1"})
	sysctl6In(t, k.node, map[string]string{"conf/all/forwarding": "1"})
	sh(t, "ip", "-n", k.lb, "neigh", "replace", "fd00:2::2", "lladdr", macIn(t, k.node, "n0"), "dev", "l1", "nud", "permanent")

	for i, pod := range k.pods {
		hp := fmt.Sprintf("hp%d", i+1)
		ip := k6Pods[i].String()
		sh(t, "ip", "-n", k.node, "link", "add", hp, "type", "veth", "peer", "name", "eth0", "netns", pod)
		sh(t, "ip", "-n", k.node, "addr", "add", "fe80::1/64", "dev", hp, "nodad")
		sh(t, "ip", "-n", k.node, "link", "set", hp, "up")
		sh(t, "ip", "-n", k.node, "-6", "route", "add", ip+"/128", "dev", hp)
		sh(t, "ip", "-n", pod, "addr", "add", ip+"/128", "dev", "eth0", "nodad")
		sh(t, "ip", "-n", pod, "link", "set", "eth0", "up")
		sh(t, "ip", "-n", pod, "-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0")
	}
	// pod1 sends complete checksums; pod2 keeps the veth's partial ones,
	// which the reply program's skb helpers must finish.
	sh(t, "ip", "netns", "exec", k.pods[0], "ethtool", "-K", "eth0", "tx", "off")
	return k
}

// startLB6 runs the LB data plane of an IPv6-only node on l0, its
// backends the IPv6 pods: TCP on both VIPs (IPv6-in-IPv6 and GUE over
// IPv6), UDP on the first (GUE).
func (k *k8sTopology) startLB6(t *testing.T) {
	t.Helper()
	const tableSize = 251
	var d *lb.Dataplane
	err := netns.Do(k.lb, func() error {
		var err error
		d, err = lb.Open(lb.Options{Interface: "l0", NodeAddr6: k6LBAddr, PinPath: k.lbPin, TableSize: tableSize})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		if err := bpfobj.Cleanup(k.lbPin); err != nil {
			t.Errorf("LB cleanup: %v", err)
		}
	})
	var members []maglev.Backend
	for i, p := range k6Pods {
		if err := d.UpsertBackend(uint32(i), netip.AddrPortFrom(p, 0)); err != nil {
			t.Fatal(err)
		}
		members = append(members, maglev.Backend{Key: p.String(), Weight: 1})
	}
	slots, err := maglev.Build(members, tableSize)
	if err != nil {
		t.Fatal(err)
	}
	table := make([]uint32, tableSize)
	for i, b := range slots {
		table[i] = uint32(b)
	}
	for id, s := range []struct {
		key   lb.ServiceKey
		encap lb.Encap
	}{
		{lb.ServiceKey{VIP: k6VIP1, Port: 80, Proto: wire.ProtoTCP}, lb.EncapIPIP},
		{lb.ServiceKey{VIP: k6VIP2, Port: 80, Proto: wire.ProtoTCP}, lb.EncapGUE},
		{lb.ServiceKey{VIP: k6VIP1, Port: 53, Proto: wire.ProtoUDP}, lb.EncapGUE},
	} {
		if err := d.UpsertService(lb.Service{ID: uint32(id), Key: s.key, Encap: s.encap, Table: table}); err != nil {
			t.Fatal(err)
		}
	}
}

// startPods6 runs an HTTP server on [podIP]:8080 and a UDP echo server
// on [podIP]:5353 in every pod, answering with the pod's name and the
// client address it saw.
func (k *k8sTopology) startPods6(t *testing.T) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, pod := range k.pods {
		podName := fmt.Sprintf("pod%d", i+1)
		var ln net.Listener
		var pc net.PacketConn
		err := netns.Do(pod, func() error {
			var err error
			if ln, err = net.Listen("tcp6", netip.AddrPortFrom(k6Pods[i], k8sHTTPPort).String()); err != nil {
				return err
			}
			pc, err = net.ListenPacket("udp6", netip.AddrPortFrom(k6Pods[i], k8sDNSPort).String())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s %v", podName, r.RemoteAddr, r.Context().Value(http.LocalAddrContextKey))
		}), ReadHeaderTimeout: 5 * time.Second}
		wg.Add(2)
		go func() { defer wg.Done(); _ = srv.Serve(ln) }()
		go func() {
			defer wg.Done()
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(fmt.Appendf(nil, "%s %v %s", podName, from, buf[:n]), from)
			}
		}()
		t.Cleanup(func() { srv.Close(); pc.Close() })
	}
}

// udpAsk6 sends one datagram to [vip]:53 from a new socket and returns
// the answer and its source.
func udpAsk6(vip netip.Addr, q string) (string, netip.AddrPort, error) {
	pc, err := net.ListenPacket("udp6", netip.AddrPortFrom(k6Client, 0).String())
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	defer pc.Close()
	if _, err := pc.WriteTo([]byte(q), net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, 53))); err != nil {
		return "", netip.AddrPort{}, err
	}
	_ = pc.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1500)
	n, from, err := pc.(*net.UDPConn).ReadFromUDPAddrPort(buf)
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	return string(buf[:n]), from, nil
}

// TestKubernetesDataPath6: TestKubernetesDataPath for IPv6 pods behind an
// IPv6-only LB node. The client reaches both pods through two IPv6 VIPs
// (IPv6-in-IPv6 and GUE over IPv6) and a UDP port (GUE); the pods see the
// client's own address, serve on theirs at the target port, and every
// answer comes back from the VIP, translated on the node's uplink.
func TestKubernetesDataPath6(t *testing.T) {
	testenv.RequireRoot(t, "Kubernetes data path test (BPF, network namespaces)")
	k := newK8sTopology6(t)
	var entries []NATEntry
	for _, pod := range k6Pods {
		entries = append(entries,
			NATEntry{k6VIP1, 80, wire.ProtoTCP, pod, k8sHTTPPort},
			NATEntry{k6VIP2, 80, wire.ProtoTCP, pod, k8sHTTPPort},
			NATEntry{k6VIP1, 53, wire.ProtoUDP, pod, k8sDNSPort})
	}
	t.Cleanup(func() {
		if _, err := Cleanup(k.nodePin); err != nil {
			t.Errorf("node cleanup: %v", err)
		}
	})
	err := netns.Do(k.node, func() error {
		_, err := Setup(Options{Interface: "n0", NAT: entries, PinPath: k.nodePin})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	k.startPods6(t)
	k.startLB6(t)

	inClient := func(fn func() error) {
		t.Helper()
		if err := netns.Do(k.client, fn); err != nil {
			t.Error(err)
		}
	}
	const attempts, budget = 40, 20 * time.Second
	for _, vip := range []netip.Addr{k6VIP1, k6VIP2} {
		t.Run("TCP "+vip.String(), func(t *testing.T) {
			seen := map[string]bool{}
			var errs []error
			inClient(func() error {
				start := time.Now()
				for i := 0; i < attempts && len(seen) < 2 && time.Since(start) < budget; i++ {
					body, err := httpGet(vip)
					if err != nil {
						errs = append(errs, err)
						continue
					}
					// "podN [client]:port [podIP]:8080"
					f := strings.Fields(body)
					if len(f) != 3 || !strings.HasPrefix(f[1], "["+k6Client.String()+"]:") || !strings.HasSuffix(f[2], fmt.Sprintf("]:%d", k8sHTTPPort)) {
						return fmt.Errorf("unexpected answer %q", body)
					}
					seen[f[0]] = true
				}
				return nil
			})
			if len(seen) < 2 {
				t.Fatalf("answers from %v, want both pods; errors: %v", seen, errs)
			}
		})
	}
	t.Run("UDP", func(t *testing.T) {
		seen := map[string]bool{}
		var errs []error
		inClient(func() error {
			start := time.Now()
			for i := 0; i < attempts && len(seen) < 2 && time.Since(start) < budget; i++ {
				ans, from, err := udpAsk6(k6VIP1, "q")
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if from != netip.AddrPortFrom(k6VIP1, 53) {
					return fmt.Errorf("answer %q from %v, want from [%v]:53", ans, from, k6VIP1)
				}
				seen[strings.Fields(ans)[0]] = true
			}
			return nil
		})
		if len(seen) < 2 {
			t.Fatalf("answers from %v, want both pods; errors: %v", seen, errs)
		}
	})

	st, err := NATStats(k.nodePin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nat_fwd", "nat_rev_flow"} {
		if st[name].Packets == 0 {
			t.Errorf("counter %s is 0", name)
		}
	}
	for _, name := range []string{"nat_drop_no_entry", "nat_drop_malformed", "nat_rev_drop_write"} {
		if st[name].Packets != 0 {
			t.Errorf("counter %s is %d", name, st[name].Packets)
		}
	}
	if t.Failed() {
		t.Logf("node counters: %v", st)
	}
}
