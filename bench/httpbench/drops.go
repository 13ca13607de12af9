package main

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/api"
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
	var veths [][2]string // namespace, interface
	err := labrun.EachLink(l.p, func(ns string, k netlink.Link) {
		s := k.Attrs().Statistics
		if s == nil || k.Attrs().Name == "lo" {
			return
		}
		p := ns + "/" + k.Attrs().Name + "/"
		out[p+"rx_dropped"] = s.RxDropped + s.RxMissedErrors
		out[p+"tx_dropped"] = s.TxDropped
		if k.Type() == "veth" {
			veths = append(veths, [2]string{ns, k.Attrs().Name})
		}
	})
	if err != nil {
		return nil, err
	}
	// The veth driver's own counters (its XDP ring's drops, XDP_TX
	// errors) are ethtool statistics, which netlink does not carry.
	for _, v := range veths {
		s, err := exec.Command(l.xlb, netns.ExecCommand, v[0], "--", "ethtool", "-S", v[1]).Output()
		if err != nil {
			// A driver without statistics.
			continue
		}
		maps.Copy(out, lossStats(v[0]+"/"+v[1]+"/", s))
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
