package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/netns"
)

// linkCounters are an interface's packet counters.
type linkCounters struct {
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	RxDropped uint64 `json:"rx_dropped"`
	TxDropped uint64 `json:"tx_dropped"`
}

func (l linkCounters) sub(o linkCounters) linkCounters {
	return linkCounters{delta(l.RxPackets, o.RxPackets), delta(l.TxPackets, o.TxPackets),
		delta(l.RxDropped, o.RxDropped), delta(l.TxDropped, o.TxDropped)}
}

func delta(now, before uint64) uint64 {
	if now < before {
		return 0
	}
	return now - before
}

// probe names an interface of the path: its namespace, its name, and
// the label reports use ("router/n1").
type probe struct{ ns, dev, label string }

// probes lists the interfaces whose counters a run reads, along the
// path.
func (pa *path) probes() []probe {
	r := pa.plan.Router
	ps := []probe{
		{pa.client.Namespace, pa.client.Interface, pa.client.Name + "/" + pa.client.Interface},
		{r, pa.client.Peer, "router/" + pa.client.Peer},
		{r, pa.node.Peer, "router/" + pa.node.Peer},
		{pa.node.Namespace, pa.node.Interface, pa.node.Name + "/" + pa.node.Interface},
	}
	for _, b := range pa.backends {
		ps = append(ps, probe{r, b.Peer, "router/" + b.Peer}, probe{b.Namespace, b.Interface, b.Name + "/" + b.Interface})
	}
	return ps
}

// snapshot is every counter a run compares before and after.
type snapshot struct {
	cpus      map[int]cpuTimes
	softirqd  map[int]uint64 // ksoftirqd/N's run time, ns
	backends  []snmp
	client    snmp
	node      snmp
	router    snmp
	links     map[string]linkCounters
	bpf       map[string]ebpf.ProgramStats
	xlbStatus *api.Status
}

// ksoftirqds finds the PIDs of the ksoftirqd/N threads: they do the
// softirq work that a CPU defers when it has done enough at once.
func ksoftirqds() (map[int]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		if cpu, ok := strings.CutPrefix(name, "ksoftirqd/"); ok {
			if n, err := strconv.Atoi(cpu); err == nil {
				out[n] = pid
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ksoftirqd threads in /proc")
	}
	return out, nil
}

// readSNMP reads namespace ns's /proc/net/snmp, through
// /proc/thread-self: /proc/net follows the process's main thread.
func readSNMP(ns string) (snmp, error) {
	var s snmp
	err := netns.Do(ns, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		s, err = parseSNMP(bytes.NewReader(b))
		return err
	})
	if err != nil {
		return s, fmt.Errorf("snmp of %s: %w", ns, err)
	}
	return s, nil
}

func readLink(ns, dev string) (linkCounters, error) {
	var c linkCounters
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		st := l.Attrs().Statistics
		if st == nil {
			return fmt.Errorf("no statistics")
		}
		c = linkCounters{st.RxPackets, st.TxPackets, st.RxDropped, st.TxDropped}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("counters of %s in %s: %w", dev, ns, err)
	}
	return c, nil
}

// take reads every counter. progs are the BPF programs whose run-time
// statistics to read (by label), nil for none; xlb, if set, is the
// agent's socket.
func (pa *path) take(softirqd map[int]int, progs map[string]*ebpf.Program, xlbSocket string) (snapshot, error) {
	s := snapshot{softirqd: map[int]uint64{}, links: map[string]linkCounters{}}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if s.cpus, err = parseProcStat(bytes.NewReader(b)); err != nil {
		return s, err
	}
	for cpu, pid := range softirqd {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return s, fmt.Errorf("ksoftirqd/%d: %w", cpu, err)
		}
		if s.softirqd[cpu], err = parseSchedstat(b); err != nil {
			return s, fmt.Errorf("ksoftirqd/%d: %w", cpu, err)
		}
	}
	for _, h := range pa.backends {
		sn, err := readSNMP(h.Namespace)
		if err != nil {
			return s, err
		}
		s.backends = append(s.backends, sn)
	}
	if s.client, err = readSNMP(pa.client.Namespace); err != nil {
		return s, err
	}
	if s.node, err = readSNMP(pa.node.Namespace); err != nil {
		return s, err
	}
	if s.router, err = readSNMP(pa.plan.Router); err != nil {
		return s, err
	}
	for _, p := range pa.probes() {
		if s.links[p.label], err = readLink(p.ns, p.dev); err != nil {
			return s, err
		}
	}
	if len(progs) > 0 {
		s.bpf = map[string]ebpf.ProgramStats{}
		for label, prog := range progs {
			st, err := prog.Stats()
			if err != nil {
				return s, fmt.Errorf("run-time statistics of %s: %w", label, err)
			}
			s.bpf[label] = *st
		}
	}
	if xlbSocket != "" {
		if s.xlbStatus, err = api.GetStatus(xlbSocket); err != nil {
			return s, fmt.Errorf("xlb status: %w", err)
		}
	}
	return s, nil
}

// pathProgs opens the XDP programs attached along the path, by the
// label of their interface, plus the generator's: the ones whose run
// time a statistics pass reports. The caller closes them.
func (pa *path) pathProgs(gen *generator) (map[string]*ebpf.Program, error) {
	progs := map[string]*ebpf.Program{"generator": gen.prog}
	for _, p := range pa.probes() {
		id, err := xdpProgID(p.ns, p.dev)
		if err != nil {
			closeProgs(progs, gen)
			return nil, err
		}
		if id == 0 {
			continue
		}
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			closeProgs(progs, gen)
			return nil, fmt.Errorf("XDP program %d on %s: %w", id, p.label, err)
		}
		progs[p.label] = prog
	}
	return progs, nil
}

func closeProgs(progs map[string]*ebpf.Program, gen *generator) {
	for _, p := range progs {
		if p != gen.prog {
			p.Close()
		}
	}
}

// runOpts says how to measure one run.
type runOpts struct {
	Section    string
	Variant    string
	Round      int
	CPUs       []int
	NodeQueues int
	Packets    uint64
	Warmup     uint64
	Timeout    time.Duration
	// Stats enables BPF run-time statistics (BPF_ENABLE_STATS) for the
	// run and reads every XDP program's on the path.
	Stats bool
	// XLBSocket is the agent's API socket while an agent runs.
	XLBSocket string
	// Direction is a NAT variant's: dirForward or dirReverse; "" for
	// the others (forward).
	Direction string
}

// flow says where a run's frames start and where they are counted.
type flow struct {
	spec frameSpec
	// ns and ifname are the generator's namespace and interface.
	ns, ifname string
	// dports, if set, are the ports the generator draws each frame's
	// destination port from (see portTable), instead of varying the
	// source port.
	dports []uint16
	// reverse: the frames go to the client and are counted at its
	// sockets, not at the backends'.
	reverse bool
}

// forward is a variant's flow from the client to its destination.
func (pa *path) forward(variant string) flow {
	return flow{spec: pa.dst(variant), ns: pa.client.Namespace, ifname: pa.client.Interface}
}

// countedIn lists the namespaces whose sockets count fl's frames.
func (pa *path) countedIn(fl flow) []string {
	if fl.reverse {
		return []string{pa.client.Namespace}
	}
	var out []string
	for _, h := range pa.backends {
		out = append(out, h.Namespace)
	}
	return out
}

// measure sends o.Packets frames of fl (after o.Warmup frames that
// resolve neighbours, fill caches and create conntrack entries and
// sessions) and returns what the counters saw.
func (pa *path) measure(ctx context.Context, fl flow, o runOpts, softirqd map[int]int) (Run, error) {
	r := Run{Section: o.Section, Variant: o.Variant, Direction: o.Direction, Round: o.Round, Cores: len(o.CPUs), CPUs: o.CPUs, NodeQueues: o.NodeQueues, Stats: o.Stats}
	frame, err := udpFrame(fl.spec)
	if err != nil {
		return r, err
	}
	gen, err := newGenerator(frame, fl.dports)
	if err != nil {
		return r, err
	}
	defer gen.Close()
	send := sendOpts{NS: fl.ns, Ifname: fl.ifname, CPUs: o.CPUs, MaxChunk: 1 << 18}
	if o.Warmup > 0 {
		send.Count, send.Deadline = o.Warmup, time.Now().Add(o.Timeout)
		if _, err := gen.send(ctx, frame, send); err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
	}
	quiet := func() error {
		return waitQuiet(ctx, 50*time.Millisecond, 3*time.Second, func() (uint64, error) {
			var n uint64
			for _, ns := range pa.countedIn(fl) {
				s, err := readSNMP(ns)
				if err != nil {
					return 0, err
				}
				n += s.UDP.delivered() + s.UDP.NoPorts
			}
			return n, nil
		})
	}
	if err := quiet(); err != nil {
		return r, err
	}
	var progs map[string]*ebpf.Program
	if o.Stats {
		stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			return r, fmt.Errorf("enable BPF run-time statistics: %w", err)
		}
		defer stats.Close()
		if progs, err = pa.pathProgs(gen); err != nil {
			return r, err
		}
		defer closeProgs(progs, gen)
	}
	before, err := pa.take(softirqd, progs, o.XLBSocket)
	if err != nil {
		return r, err
	}
	send.Count, send.Deadline = o.Packets, time.Now().Add(o.Timeout)
	sr, err := gen.send(ctx, frame, send)
	if err != nil {
		return r, err
	}
	if err := quiet(); err != nil {
		return r, err
	}
	after, err := pa.take(softirqd, progs, o.XLBSocket)
	if err != nil {
		return r, err
	}
	fill(&r, sr, before, after)
	if r.Sent < o.Packets {
		r.Note = fmt.Sprintf("stopped after %d of %d frames (time limit %s)", r.Sent, o.Packets, o.Timeout)
	}
	return r, nil
}
