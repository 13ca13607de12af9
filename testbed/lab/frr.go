package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// frrDaemonDir is where Debian installs FRR's daemons.
const frrDaemonDir = "/usr/lib/frr"

// frrUser owns the lab's FRR directory: the daemons drop root for it.
const frrUser = "frr"

// frrPeerGroup is the peer group of the nodes' dynamic sessions.
const frrPeerGroup = "XLB"

// maximumPaths bounds the next hops of one route, as a router's ECMP
// width does.
const maximumPaths = 64

// FRRDir is the directory of a lab's FRR: frr.conf, and the daemons'
// pid files and sockets (vtysh --vty_socket DIR reaches them).
func FRRDir(prefix string) string { return filepath.Join(StateDir(prefix), "frr") }

// frrDaemons are the FRR daemons plan p runs, in start order: zebra
// first, as the others connect to it.
func frrDaemons(p Plan) []string {
	d := []string{"zebra", "bgpd"}
	if p.Spec.BFD {
		d = append(d, "bfdd")
	}
	return d
}

// frrProcess is the StartProcess name of an FRR daemon.
func frrProcess(daemon string) string { return "frr-" + daemon }

// frrConfig renders the integrated frr.conf. Without a reflector the
// nodes connect to the router from anywhere on their segment (a listen
// range, so nodes need no configuration here) over eBGP; with one, the
// router has a single iBGP session, to the reflector, which sends it
// every path with add-path (FRR accepts add-path by default).
func frrConfig(p Plan) string {
	hold := int(p.BGP.HoldTime / time.Second)
	var b strings.Builder
	fmt.Fprintf(&b, "! FRR of xlb lab %q, written by `xlb lab up`.\n", p.Spec.Prefix)
	b.WriteString("frr defaults traditional\nlog stdout informational\nlog timestamp precision 3\n!\n")
	fmt.Fprintf(&b, "router bgp %d\n", RouterASN)
	fmt.Fprintf(&b, " bgp router-id %s\n", p.NodeSegment.Gateway())
	b.WriteString(" bgp log-neighbor-changes\n")
	if p.BGP.GracefulRestart {
		b.WriteString(" bgp graceful-restart\n")
	}
	// eBGP without policies: the lab accepts whatever the nodes send.
	b.WriteString(" no bgp ebgp-requires-policy\n")
	b.WriteString(" no bgp default ipv4-unicast\n")
	// Each node has its own AS path in general; the paths of one VIP
	// are still equal.
	b.WriteString(" bgp bestpath as-path multipath-relax\n")
	fmt.Fprintf(&b, " timers bgp %d %d\n", hold/3, hold)
	neighbor := frrPeerGroup
	if p.Reflector != nil {
		neighbor = p.Reflector.Addr.String()
		fmt.Fprintf(&b, " neighbor %s remote-as internal\n", neighbor)
		fmt.Fprintf(&b, " neighbor %s timers connect 1\n", neighbor)
	} else {
		fmt.Fprintf(&b, " neighbor %s peer-group\n", neighbor)
		fmt.Fprintf(&b, " neighbor %s remote-as external\n", neighbor)
		if p.BGP.BFD != nil {
			fmt.Fprintf(&b, " neighbor %s bfd\n", neighbor)
			fmt.Fprintf(&b, " neighbor %s bfd profile xlb-lab\n", neighbor)
		}
		fmt.Fprintf(&b, " bgp listen range %s peer-group %s\n", p.NodeSegment.Subnet.Masked(), neighbor)
		if s6 := p.NodeSegment.Subnet6; s6.IsValid() {
			fmt.Fprintf(&b, " bgp listen range %s peer-group %s\n", s6.Masked(), neighbor)
		}
	}
	families := []string{"ipv4"}
	if p.VIPPrefix6.IsValid() {
		// Over every session, of either family: the nodes offer IPv6
		// unicast beside IPv4 when they have an IPv6 address.
		families = append(families, "ipv6")
	}
	for _, f := range families {
		fmt.Fprintf(&b, " !\n address-family %s unicast\n", f)
		fmt.Fprintf(&b, "  neighbor %s activate\n", neighbor)
		fmt.Fprintf(&b, "  maximum-paths %d\n", maximumPaths)
		fmt.Fprintf(&b, "  maximum-paths ibgp %d\n", maximumPaths)
		b.WriteString(" exit-address-family\n")
	}
	b.WriteString("exit\n!\n")
	if bfd := p.BGP.BFD; bfd != nil {
		b.WriteString("bfd\n profile xlb-lab\n")
		fmt.Fprintf(&b, "  detect-multiplier %d\n", bfd.Multiplier)
		fmt.Fprintf(&b, "  receive-interval %d\n", bfd.MinRx.Milliseconds())
		fmt.Fprintf(&b, "  transmit-interval %d\n", bfd.MinTx.Milliseconds())
		b.WriteString(" exit\nexit\n!\n")
	}
	return b.String()
}

// startFRR starts zebra, bgpd (and bfdd) in the router namespace, each
// with its own sockets in FRRDir, and applies frr.conf through vtysh:
// handed to each daemon with -f, the integrated file would lose every
// section after the first one a daemon does not know.
func startFRR(ctx context.Context, p Plan) error {
	prefix := p.Spec.Prefix
	vtysh, err := exec.LookPath("vtysh")
	if err != nil {
		return fmt.Errorf("FRR: vtysh: %w (install Debian's frr package)", err)
	}
	for _, d := range frrDaemons(p) {
		if _, err := os.Stat(filepath.Join(frrDaemonDir, d)); err != nil {
			return fmt.Errorf("FRR: %w (install Debian's frr package)", err)
		}
	}
	dir := FRRDir(prefix)
	if err := makeFRRDir(dir, p); err != nil {
		return fmt.Errorf("FRR: %w", err)
	}
	for _, d := range frrDaemons(p) {
		args := []string{filepath.Join(frrDaemonDir, d),
			"-f", filepath.Join(dir, "empty.conf"), // never /etc/frr's
			"-i", filepath.Join(dir, d+".pid"),
			"-z", filepath.Join(dir, "zserv.api"),
			"--vty_socket", dir,
			"-P", "0", // no TCP vty
			"--log", "stdout",
		}
		if d == "bfdd" {
			args = append(args, "--bfdctl", filepath.Join(dir, "bfdd.sock"))
		}
		name := frrProcess(d)
		if _, err := StartProcess(prefix, p.Router, name, args...); err != nil {
			return fmt.Errorf("FRR: %w", err)
		}
		// The vty socket is the daemon's last step of starting; the
		// others need zebra's API socket before they start.
		want := []string{filepath.Join(dir, d+".vty")}
		if d == "zebra" {
			want = append(want, filepath.Join(dir, "zserv.api"))
		}
		err := waitFor(ctx, readyTimeout, prefix, name, func() (bool, error) {
			for _, w := range want {
				if _, err := os.Stat(w); err != nil {
					return false, err
				}
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("FRR: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, vtysh, "--vty_socket", dir, "--config_dir", dir, "-b")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("FRR: vtysh -b (apply %s): %w: %s", filepath.Join(dir, "frr.conf"), err, strings.TrimSpace(string(out)))
	}
	// vtysh skips a daemon it cannot reach without failing: check that
	// bgpd has its instance.
	out, err := frrShow(ctx, p, "show running-config")
	if err != nil {
		return fmt.Errorf("FRR: %w", err)
	}
	if want := fmt.Sprintf("router bgp %d\n", RouterASN); !strings.Contains(string(out), want) {
		return fmt.Errorf("FRR: bgpd did not take frr.conf (its running config lacks %q); see %s", strings.TrimSpace(want), LogFile(prefix, frrProcess("bgpd")))
	}
	return nil
}

// makeFRRDir creates dir, owned by user frr (the daemons write their
// pid files and sockets there after dropping root), with frr.conf, the
// empty per-daemon config and vtysh.conf in it.
func makeFRRDir(dir string, p Plan) error {
	u, err := user.Lookup(frrUser)
	if err != nil {
		return fmt.Errorf("user %s: %w (install Debian's frr package)", frrUser, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("user %s: %w", frrUser, err)
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		return err
	}
	files := []struct{ name, text string }{
		{"frr.conf", frrConfig(p)},
		{"empty.conf", ""},
		{"vtysh.conf", "service integrated-vtysh-config\n"},
	}
	paths := []string{dir}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(f.text), 0o640); err != nil {
			return err
		}
		paths = append(paths, path)
	}
	for _, path := range paths {
		if err := os.Chown(path, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// frrShow runs one vtysh command against the lab's FRR.
func frrShow(ctx context.Context, p Plan, command string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "vtysh", "--vty_socket", FRRDir(p.Spec.Prefix), "-c", command).Output()
	if err != nil {
		return nil, fmt.Errorf("vtysh -c %q: %w", command, commandError(err))
	}
	return out, nil
}

// frrSummary is the part of `show bgp summary json` the lab reads.
type frrSummary struct {
	IPv4 struct {
		Peers map[string]struct {
			RemoteAS uint32 `json:"remoteAs"`
			State    string `json:"state"`
			PfxRcd   int    `json:"pfxRcd"`
		} `json:"peers"`
	} `json:"ipv4Unicast"`
}

// frrSessions lists the router's BGP sessions.
func frrSessions(ctx context.Context, p Plan) ([]Session, error) {
	out, err := frrShow(ctx, p, "show bgp summary json")
	if err != nil {
		return nil, err
	}
	return parseFRRSummary(out)
}

func parseFRRSummary(b []byte) ([]Session, error) {
	var s frrSummary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("show bgp summary json: %w", err)
	}
	var ss []Session
	for addr, peer := range s.IPv4.Peers {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return nil, fmt.Errorf("show bgp summary json: peer %q: %w", addr, err)
		}
		ss = append(ss, Session{Speaker: "router", Peer: a, ASN: peer.RemoteAS, State: strings.ToLower(peer.State), Prefixes: &peer.PfxRcd})
	}
	slices.SortFunc(ss, func(a, b Session) int { return a.Peer.Compare(b.Peer) })
	return ss, nil
}

// waitFRRPeer waits until FRR's session with peer is established.
func waitFRRPeer(ctx context.Context, p Plan, peer netip.Addr, timeout time.Duration) error {
	bgpd := frrProcess("bgpd")
	return waitFor(ctx, timeout, p.Spec.Prefix, bgpd, func() (bool, error) {
		out, err := frrShow(ctx, p, "show bgp summary json")
		if err != nil {
			return false, err
		}
		ss, err := parseFRRSummary(out)
		if err != nil {
			return false, err
		}
		for _, s := range ss {
			if s.Peer == peer {
				return s.State == "established", fmt.Errorf("session with %s is %s", peer, s.State)
			}
		}
		return false, fmt.Errorf("no session with %s", peer)
	})
}
