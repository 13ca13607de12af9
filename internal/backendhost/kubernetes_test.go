package backendhost

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// k8sTopology is a Kubernetes node in miniature, in network namespaces:
//
//	client ── c0 ═ l0 ── lb ── l1 ═ n0 ── node ─┬─ hp1 ═ eth0 ── pod1
//	10.0.1.2        (xlb XDP on l0)   10.0.2.2  └─ hp2 ═ eth0 ── pod2
//
// The lb namespace runs the real LB data plane (internal/dataplane/lb) with
// the pods' addresses as backends and routes the pod CIDR to the node.
// The node routes each pod /32 over its veth and answers the pods' ARP
// for their gateway by proxy ARP, as Calico-style CNIs with host routing
// do. The pods only have their own address and serve on it; the VIP is
// nowhere in them.
type k8sTopology struct {
	client, lb, node string
	pods             []string
	lbPin, nodePin   string
}

var (
	k8sVIP1 = netip.MustParseAddr("10.99.0.1")
	k8sVIP2 = netip.MustParseAddr("10.99.0.2")
	k8sPods = []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("10.244.1.3")}
)

const (
	k8sClient   = "10.0.1.2"
	k8sHTTPPort = 8080 // the pods' target ports
	k8sDNSPort  = 5353
	k8sDeadPort = 5999 // nothing listens here
)

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func sysctlIn(t *testing.T, ns string, kv map[string]string) {
	t.Helper()
	err := netns.Do(ns, func() error {
		for k, v := range kv {
			if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4", k), []byte(v), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", ns, err)
	}
}

func macIn(t *testing.T, ns, ifname string) string {
	t.Helper()
	var mac string
	err := netns.Do(ns, func() error {
		i, err := net.InterfaceByName(ifname)
		if err == nil {
			mac = i.HardwareAddr.String()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

func newK8sTopology(t *testing.T) *k8sTopology {
	t.Helper()
	pid := os.Getpid()
	name := func(role string) string { return fmt.Sprintf("xlbk8s-%d-%s", pid, role) }
	k := &k8sTopology{
		client: name("client"), lb: name("lb"), node: name("node"),
		pods:    []string{name("pod1"), name("pod2")},
		lbPin:   filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-k8s-%d-lb", pid)),
		nodePin: filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-k8s-%d-node", pid)),
	}
	for _, ns := range append([]string{k.client, k.lb, k.node}, k.pods...) {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	noRP := map[string]string{"conf/all/rp_filter": "0", "conf/default/rp_filter": "0"}

	sh(t, "ip", "-n", k.client, "link", "add", "c0", "type", "veth", "peer", "name", "l0", "netns", k.lb)
	sh(t, "ip", "-n", k.lb, "link", "add", "l1", "type", "veth", "peer", "name", "n0", "netns", k.node)
	sh(t, "ip", "-n", k.client, "addr", "add", k8sClient+"/24", "dev", "c0")
	sh(t, "ip", "-n", k.client, "link", "set", "c0", "up")
	sh(t, "ip", "-n", k.client, "route", "add", "default", "via", "10.0.1.1")
	// A client on the same machine as an XDP node must send complete
	// checksums (docs/operations.md); the pods then check that the
	// translation kept them right.
	sh(t, "ip", "netns", "exec", k.client, "ethtool", "-K", "c0", "tx", "off")

	sh(t, "ip", "-n", k.lb, "addr", "add", "10.0.1.1/24", "dev", "l0")
	sh(t, "ip", "-n", k.lb, "addr", "add", "10.0.2.1/24", "dev", "l1")
	for _, l := range []string{"l0", "l1"} {
		sh(t, "ip", "-n", k.lb, "link", "set", l, "up")
	}
	sh(t, "ip", "-n", k.lb, "route", "add", "10.244.1.0/24", "via", "10.0.2.2")
	// Replies come back through lb with the VIP as their source.
	sysctlIn(t, k.lb, map[string]string{"ip_forward": "1", "conf/all/rp_filter": "0", "conf/default/rp_filter": "0", "conf/l1/rp_filter": "0"})

	sh(t, "ip", "-n", k.node, "addr", "add", "10.0.2.2/24", "dev", "n0")
	sh(t, "ip", "-n", k.node, "link", "set", "n0", "up")
	sh(t, "ip", "-n", k.node, "route", "add", "default", "via", "10.0.2.1")
	sysctlIn(t, k.node, map[string]string{"ip_forward": "1"})
	sysctlIn(t, k.node, noRP)
	// The LB's next hop to the pods is the node: resolved once, here.
	sh(t, "ip", "-n", k.lb, "neigh", "replace", "10.0.2.2", "lladdr", macIn(t, k.node, "n0"), "dev", "l1", "nud", "permanent")

	for i, pod := range k.pods {
		hp := fmt.Sprintf("hp%d", i+1)
		ip := k8sPods[i].String()
		sh(t, "ip", "-n", k.node, "link", "add", hp, "type", "veth", "peer", "name", "eth0", "netns", pod)
		sh(t, "ip", "-n", k.node, "link", "set", hp, "up")
		sh(t, "ip", "-n", k.node, "route", "add", ip+"/32", "dev", hp, "scope", "link")
		sysctlIn(t, k.node, map[string]string{"conf/" + hp + "/proxy_arp": "1", "conf/" + hp + "/rp_filter": "0"})
		sh(t, "ip", "-n", pod, "addr", "add", ip+"/32", "dev", "eth0")
		sh(t, "ip", "-n", pod, "link", "set", "eth0", "up")
		sh(t, "ip", "-n", pod, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
		sh(t, "ip", "-n", pod, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
		sysctlIn(t, pod, noRP)
	}
	// pod1 sends complete checksums, which the client checks after the
	// reply's rewrite; pod2 keeps the veth default (partial checksums,
	// finished by nobody), the path a real pod's TSO takes.
	sh(t, "ip", "netns", "exec", k.pods[0], "ethtool", "-K", "eth0", "tx", "off")
	return k
}

// startLB runs the LB data plane on l0 with the services of the test,
// their backends being the pods.
func (k *k8sTopology) startLB(t *testing.T) {
	t.Helper()
	const tableSize = 251
	var d *lb.Dataplane
	err := netns.Do(k.lb, func() error {
		var err error
		d, err = lb.Open(lb.Options{Interface: "l0", NodeAddr: netip.MustParseAddr("10.0.2.1"), PinPath: k.lbPin, TableSize: tableSize})
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
	nextID := uint32(0)
	for id, s := range []struct {
		key   lb.ServiceKey
		encap lb.Encap
		pods  []netip.Addr
	}{
		{lb.ServiceKey{VIP: k8sVIP1, Port: 80, Proto: wire.ProtoTCP}, lb.EncapIPIP, k8sPods},
		{lb.ServiceKey{VIP: k8sVIP2, Port: 80, Proto: wire.ProtoTCP}, lb.EncapGUE, k8sPods},
		{lb.ServiceKey{VIP: k8sVIP1, Port: 53, Proto: wire.ProtoUDP}, lb.EncapGUE, k8sPods},
		{lb.ServiceKey{VIP: k8sVIP1, Port: 54, Proto: wire.ProtoUDP}, lb.EncapIPIP, k8sPods[:1]},
	} {
		var members []maglev.Backend
		var ids []uint32
		for _, p := range s.pods {
			if err := d.UpsertBackend(nextID, netip.AddrPortFrom(p, 0)); err != nil {
				t.Fatal(err)
			}
			members = append(members, maglev.Backend{Key: p.String(), Weight: 1})
			ids = append(ids, nextID)
			nextID++
		}
		slots, err := maglev.Build(members, tableSize)
		if err != nil {
			t.Fatal(err)
		}
		table := make([]uint32, tableSize)
		for i, b := range slots {
			table[i] = ids[b]
		}
		if err := d.UpsertService(lb.Service{ID: uint32(id), Key: s.key, Encap: s.encap, Table: table}); err != nil {
			t.Fatal(err)
		}
	}
}

// startPods runs an HTTP server on podIP:8080 and a UDP echo server on
// podIP:5353 in every pod; both answer with the pod's name and what the
// pod saw of the client.
func (k *k8sTopology) startPods(t *testing.T) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, pod := range k.pods {
		podName := fmt.Sprintf("pod%d", i+1)
		var ln net.Listener
		var pc net.PacketConn
		err := netns.Do(pod, func() error {
			var err error
			if ln, err = net.Listen("tcp", netip.AddrPortFrom(k8sPods[i], k8sHTTPPort).String()); err != nil {
				return err
			}
			pc, err = net.ListenPacket("udp", netip.AddrPortFrom(k8sPods[i], k8sDNSPort).String())
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

// httpGet asks vip:80 from the client once and returns the body.
func httpGet(vip netip.Addr) (string, error) {
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(vip, 80).String(), 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: vip\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// udpAsk sends one datagram to vip:53 from a new socket (a new source
// port) and returns the answer and its source address.
func udpAsk(vip netip.Addr, q string) (string, netip.AddrPort, error) {
	pc, err := net.ListenPacket("udp4", k8sClient+":0")
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

// TestKubernetesDataPath: a client reaches pods through the LB and the
// node's translation, with TCP over IPIP and GUE and UDP over GUE, gets
// answers from both pods with the VIP as their source, and learns of a
// closed UDP port through the pod's translated ICMP error.
func TestKubernetesDataPath(t *testing.T) {
	testenv.RequireRoot(t, "Kubernetes data path test (BPF, network namespaces)")
	k := newK8sTopology(t)
	var entries []NATEntry
	for _, pod := range k8sPods {
		entries = append(entries,
			NATEntry{k8sVIP1, 80, wire.ProtoTCP, pod, k8sHTTPPort},
			NATEntry{k8sVIP2, 80, wire.ProtoTCP, pod, k8sHTTPPort}, // two VIPs on one pod port
			NATEntry{k8sVIP1, 53, wire.ProtoUDP, pod, k8sDNSPort})
	}
	entries = append(entries, NATEntry{k8sVIP1, 54, wire.ProtoUDP, k8sPods[0], k8sDeadPort})
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
	k.startPods(t)
	k.startLB(t)

	inClient := func(fn func() error) {
		t.Helper()
		if err := netns.Do(k.client, fn); err != nil {
			t.Error(err)
		}
	}
	// Each connection has a new source port, so Maglev spreads them. A
	// broken path fails each attempt by a timeout: the budget bounds the
	// whole loop.
	const attempts, budget = 40, 20 * time.Second
	for _, vip := range []netip.Addr{k8sVIP1, k8sVIP2} {
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
					// "podN client:port podIP:8080": the pod saw the client
					// itself and served on its own address.
					f := strings.Fields(body)
					if len(f) != 3 || !strings.HasPrefix(f[1], k8sClient+":") || !strings.HasSuffix(f[2], fmt.Sprintf(":%d", k8sHTTPPort)) {
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
				ans, from, err := udpAsk(k8sVIP1, "q")
				if err != nil {
					errs = append(errs, err)
					continue
				}
				// The answer must come from the VIP, not from the pod.
				if from != netip.AddrPortFrom(k8sVIP1, 53) {
					return fmt.Errorf("answer %q from %v, want from %v:53", ans, from, k8sVIP1)
				}
				seen[strings.Fields(ans)[0]] = true
			}
			return nil
		})
		if len(seen) < 2 {
			t.Fatalf("answers from %v, want both pods; errors: %v", seen, errs)
		}
	})
	t.Run("ICMP port unreachable", func(t *testing.T) {
		var got error
		inClient(func() error {
			// Only a translated error (about client -> VIP:54) reaches
			// this connected socket; untranslated, the read times out.
			for i := 0; i < 3; i++ {
				c, err := net.Dial("udp4", netip.AddrPortFrom(k8sVIP1, 54).String())
				if err != nil {
					return err
				}
				_, _ = c.Write([]byte("anyone?"))
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				_, got = c.Read(make([]byte, 100))
				c.Close()
				if errors.Is(got, syscall.ECONNREFUSED) {
					return nil
				}
			}
			return nil
		})
		if !errors.Is(got, syscall.ECONNREFUSED) {
			t.Fatalf("read after a datagram to a closed pod port: %v, want connection refused", got)
		}
	})

	st, err := NATStats(k.nodePin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nat_fwd", "nat_rev_flow", "nat_rev_icmp"} {
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
