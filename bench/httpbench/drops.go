package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// dropCounters are the lab's loss counters at one moment, by name
// ("namespace/interface/counter", "namespace/xlb/reason"): each
// interface's rx and tx drops, the veth driver's XDP ring and transmit
// errors (ethtool -S), and the drop reasons of every xlb node's data
// plane. A round's differences say where the packets its client sent
// again were lost.
func (l *benchLab) dropCounters() (map[string]uint64, error) {
	out := map[string]uint64{}
	var spaces []string
	spaces = append(spaces, l.p.Router)
	for _, hs := range [][]string{hostNS(l.p.Clients), hostNS(l.p.Nodes), hostNS(l.p.Backends)} {
		spaces = append(spaces, hs...)
	}
	for _, ns := range spaces {
		if err := l.linkDrops(ns, out); err != nil {
			return nil, err
		}
	}
	for _, n := range l.p.Nodes {
		st, err := api.GetStatus(labrun.Socket(l.p, n))
		if err != nil {
			// A node without an agent (a proxy path's node) has no
			// data-plane reasons.
			continue
		}
		for r, v := range st.Reasons {
			if strings.HasPrefix(r, "drop") {
				out[n.Namespace+"/xlb/"+r] = v
			}
		}
	}
	return out, nil
}

// linkDrops adds namespace ns's interface loss counters to out.
func (l *benchLab) linkDrops(ns string, out map[string]uint64) error {
	b, err := exec.Command(l.xlb, netns.ExecCommand, ns, "--", "ip", "-j", "-s", "link", "show").Output()
	if err != nil {
		return fmt.Errorf("namespace %s: ip -s link: %w", ns, err)
	}
	var links []struct {
		Name  string `json:"ifname"`
		Kind  string `json:"link_type"`
		Stats struct {
			RX struct{ Dropped, Missed uint64 } `json:"rx"`
			TX struct{ Dropped uint64 }         `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(b, &links); err != nil {
		return fmt.Errorf("namespace %s: ip -j -s link: %w", ns, err)
	}
	for _, k := range links {
		if k.Name == "lo" {
			continue
		}
		p := ns + "/" + k.Name + "/"
		out[p+"rx_dropped"] = k.Stats.RX.Dropped + k.Stats.RX.Missed
		out[p+"tx_dropped"] = k.Stats.TX.Dropped
		s, err := exec.Command(l.xlb, netns.ExecCommand, ns, "--", "ethtool", "-S", k.Name).Output()
		if err != nil {
			// Bridges and other drivers without statistics.
			continue
		}
		maps.Copy(out, lossStats(p, s))
	}
	return nil
}

// lossStats picks the loss counters (names with drop or err) from
// `ethtool -S` output, each name prefixed with p.
func lossStats(p string, s []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(s))
	for sc.Scan() {
		name, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !(strings.Contains(name, "drop") || strings.Contains(name, "err")) {
			continue
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64); err == nil {
			out[p+name] = v
		}
	}
	return out
}

// dropDelta is how much each counter that grew from a to b grew.
func dropDelta(a, b map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range b {
		if v > a[k] {
			out[k] = v - a[k]
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// dropText shows d as "name +n, ..." sorted by name.
func dropText(d map[string]uint64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		out = append(out, fmt.Sprintf("%s +%d", k, d[k]))
	}
	return strings.Join(out, ", ")
}

// lost is the frames the lab's interfaces dropped in d (the xlb nodes'
// own drop reasons left out: those are verdicts, not losses).
func lost(d map[string]uint64) uint64 {
	var n uint64
	for k, v := range d {
		if !strings.Contains(k, "/xlb/") {
			n += v
		}
	}
	return n
}

// hostNS is the namespaces of hs.
func hostNS(hs []lab.Host) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Namespace
	}
	return out
}
