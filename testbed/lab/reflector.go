package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The route reflector is Debian's gobgpd, as in the dissertation's
// testbed (its Appendix B): it accepts any node of the node segment as
// an iBGP neighbour and reflects all their paths to the router, which
// asks for them with add-path.
const (
	reflectorName    = "rr"
	reflectorProcess = "gobgpd-rr"
	// gobgpd's gRPC API, on the reflector namespace's own loopback:
	// labs never share it.
	reflectorAPI = "127.0.0.1:50051"
	// addPathSendMax bounds the paths per prefix sent to the router; the
	// router installs at most maximumPaths of them.
	addPathSendMax = 64
	// reflectorReady bounds the wait for the router's session with the
	// reflector.
	reflectorReady = 30 * time.Second
)

// reflectorHost places the route reflector on the node segment's last
// address (10.0.1.254), out of the way of the nodes, which count up
// from the bottom.
func reflectorHost(p Plan) *Host {
	seg := p.NodeSegment
	ns := p.Spec.Prefix + "-" + reflectorName
	return &Host{
		Name:      reflectorName,
		Namespace: ns,
		Interface: HostInterface,
		Addr:      lastHost(seg.Subnet),
		Gateway:   seg.Gateway(),
		Peer:      seg.PeerPrefix + reflectorName,
		MTU:       seg.MTU,
		PinDir:    filepath.Join(p.PinDir, ns),
	}
}

// lastHost is the highest address of an IPv4 prefix below its broadcast
// address.
func lastHost(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := ^uint32(0) >> p.Bits()
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	v--
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ReflectorConfig is the path of the route reflector's gobgpd
// configuration.
func ReflectorConfig(prefix string) string {
	return filepath.Join(StateDir(prefix), reflectorName, "gobgpd.toml")
}

// reflectorConfig renders gobgpd's configuration. The nodes are plain
// iBGP neighbours (a peer group matched by the node segment), not
// reflector clients: a route from a non-client goes to the clients
// only, so the router gets every node's path and the nodes get nobody's.
// The router is the one client, with add-path so that it receives every
// node's path for a VIP instead of the reflector's best one.
func reflectorConfig(p Plan) string {
	rr, router := p.Reflector.Addr, p.NodeSegment.Gateway()
	hold := int(HoldTime / time.Second)
	var b strings.Builder
	fmt.Fprintf(&b, `# gobgpd route reflector of xlb lab %q, written by "xlb lab up".

[global.config]
  as = %d
  router-id = "%s"
  port = 179
  local-address-list = ["%s"]

# The xlb nodes: any address on the node segment, iBGP.
[[peer-groups]]
  [peer-groups.config]
    peer-group-name = "xlb-nodes"
    peer-as = %d
  [peer-groups.timers.config]
    hold-time = %d
    keepalive-interval = %d
  [[peer-groups.afi-safis]]
    [peer-groups.afi-safis.config]
      afi-safi-name = "ipv4-unicast"

[[dynamic-neighbors]]
  [dynamic-neighbors.config]
    prefix = "%s"
    peer-group = "xlb-nodes"

# The upstream router: the one reflector client, sent all paths.
[[neighbors]]
  [neighbors.config]
    neighbor-address = "%s"
    peer-as = %d
  [neighbors.timers.config]
    connect-retry = 1
    hold-time = %d
    keepalive-interval = %d
  [neighbors.transport.config]
    local-address = "%s"
  [neighbors.route-reflector.config]
    route-reflector-client = true
    route-reflector-cluster-id = "%s"
  [neighbors.add-paths.config]
    send-max = %d
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
    [neighbors.afi-safis.add-paths.config]
      send-max = %d
`, p.Spec.Prefix,
		RouterASN, rr, rr,
		RouterASN, hold, hold/3,
		p.NodeSegment.Subnet.Masked(),
		router, RouterASN, hold, hold/3, rr, rr, addPathSendMax, addPathSendMax)
	return b.String()
}

// startReflector runs gobgpd in the reflector's namespace and waits
// until it accepts BGP connections.
func startReflector(ctx context.Context, p Plan) error {
	gobgpd, err := exec.LookPath("gobgpd")
	if err != nil {
		return fmt.Errorf("route reflector: gobgpd: %w (install Debian's gobgpd package)", err)
	}
	conf := ReflectorConfig(p.Spec.Prefix)
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		return fmt.Errorf("route reflector: %w", err)
	}
	if err := os.WriteFile(conf, []byte(reflectorConfig(p)), 0o644); err != nil {
		return fmt.Errorf("route reflector: %w", err)
	}
	_, err = StartProcess(p.Spec.Prefix, p.Reflector.Namespace, reflectorProcess, gobgpd,
		"-f", conf, "-t", "toml", "--api-hosts", reflectorAPI, "--log-plain", "--pprof-disable")
	if err != nil {
		return fmt.Errorf("route reflector: %w", err)
	}
	err = waitFor(ctx, readyTimeout, p.Spec.Prefix, reflectorProcess, func() (bool, error) {
		return listeningTCP(p.Reflector.Namespace, 179)
	})
	if err != nil {
		return fmt.Errorf("route reflector: %w", err)
	}
	return nil
}

// reflectorSessions lists the reflector's BGP sessions, from `gobgp
// neighbor -j` run in its namespace.
func reflectorSessions(ctx context.Context, p Plan) ([]Session, error) {
	host, port, _ := strings.Cut(reflectorAPI, ":")
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", p.Reflector.Namespace,
		"gobgp", "-u", host, "-p", port, "neighbor", "-j").Output()
	if err != nil {
		return nil, fmt.Errorf("gobgp neighbor in %s: %w", p.Reflector.Namespace, commandError(err))
	}
	return parseGoBGPNeighbors(out)
}

// gobgpStates are the names of GoBGP's numeric session states.
var gobgpStates = []string{"unknown", "idle", "connect", "active", "opensent", "openconfirm", "established"}

func parseGoBGPNeighbors(b []byte) ([]Session, error) {
	var raw []struct {
		State struct {
			NeighborAddress string `json:"neighbor_address"`
			PeerASN         uint32 `json:"peer_asn"`
			SessionState    int    `json:"session_state"`
		} `json:"state"`
		AfiSafis []struct {
			State struct {
				Received int `json:"received"`
			} `json:"state"`
		} `json:"afi_safis"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("gobgp neighbor -j: %w", err)
	}
	var ss []Session
	for _, r := range raw {
		a, err := netip.ParseAddr(r.State.NeighborAddress)
		if err != nil {
			return nil, fmt.Errorf("gobgp neighbor -j: address %q: %w", r.State.NeighborAddress, err)
		}
		state := "state " + strconv.Itoa(r.State.SessionState)
		if r.State.SessionState >= 0 && r.State.SessionState < len(gobgpStates) {
			state = gobgpStates[r.State.SessionState]
		}
		n := 0
		for _, f := range r.AfiSafis {
			n += f.State.Received
		}
		s := Session{Speaker: reflectorName, Peer: a, ASN: r.State.PeerASN, State: state, Prefixes: &n}
		ss = append(ss, s)
	}
	return ss, nil
}
