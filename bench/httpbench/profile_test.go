package main

import (
	"strings"
	"testing"
)

// perfScript is `perf script -F comm,time,ip,sym` output: one sample
// before the window, then one of each place inside it, then one after.
const perfScript = `wrk 99.000000: 
	ffffffff81000001 tcp_v4_connect

swapper 100.100000: 
	ffffffff822601ab pv_native_safe_halt
	ffffffff82261cb5 default_idle
	ffffffff813cfed6 do_idle

nginx 100.200000: 
	ffffffff81000002 lookup_nulls_elem_raw
	ffffffff81000003 __htab_map_lookup_elem
	ffffffffc0000004 bpf_prog_a9b2259136c6b77b_xlb_lb_nat
	ffffffffc0000005 bpf_prog_c4e8c2767b452988_xlb_lb_prog
	ffffffff81000006 veth_xdp_rcv_skb
	ffffffff81000007 net_rx_action

ksoftirqd/1 100.300000: 
	ffffffffc0000008 bpf_prog_b5f3af371420a28c_natfloor
	ffffffff81000006 veth_xdp_rcv_skb

nginx 100.400000: 
	ffffffff81000009 nf_conntrack_in
	ffffffff8100000a nf_hook_slow
	ffffffff8100000b ip_rcv

nginx 100.500000: 
	ffffffff8100000c tcp_v4_rcv
	ffffffff8100000d ip_local_deliver_finish
	ffffffff8100000e ip_sabotage_in
	ffffffff8100000a nf_hook_slow
	ffffffff8100000b ip_rcv

xlb 100.600000: 
	ffffffff8100000f __htab_map_lookup_and_delete_batch
	ffffffff81000010 __sys_bpf
	00000000004a0000 github.com/xlbproject/xlb/internal/dataplane/lb.walkSome

xlb 100.700000: 
	ffffffff81000011 fib_table_lookup
	ffffffff81000012 ip_forward
	ffffffff81000013 ip_rcv_finish
	ffffffff81000007 net_rx_action
	ffffffff81000014 handle_softirqs
	ffffffff81000015 do_softirq

xlb 100.750000: 
	ffffffff81000002 lookup_nulls_elem_raw
	ffffffffc0000016 bpf_prog_eaf410565d8bb269_lbnat_reap_key
	ffffffffc0000017 bpf_prog_6a0815d1e36d1f7b_xlb_nat_reap
	ffffffff81000018 bpf_prog_test_run_syscall

wrk 100.800000: 
	00000000004b0000 http_parser_execute

Go worker 1 100.850000: 
	00000000004b0000 main.f

nginx 101.500000: 
	ffffffff8100000c tcp_v4_rcv
`

func TestProfileFrom(t *testing.T) {
	got, err := profileFrom(strings.NewReader(perfScript), 100, 101, "xlb")
	if err != nil {
		t.Fatal(err)
	}
	// The netfilter hook that calls the rest of the receive path in
	// place (ip_sabotage_in) does not make it netfilter's; softirq work
	// in the agent's context is the chain's; the sweep's reaping program
	// is the agent's.
	want := map[string]int{profIdle: 1, profXLB: 1, profFloor: 1, profNetfilter: 1, profRest: 4, profAgent: 2}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d samples, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("places %v, want %v", got, want)
	}
	if _, err := profileFrom(strings.NewReader("wrk notatime:\n\tffff x\n"), 0, 1, "xlb"); err == nil {
		t.Error("a sample line without a time: no error")
	}
}

func TestAgentComm(t *testing.T) {
	for in, want := range map[string]string{"/tmp/x/xlb": "xlb", "/b/a-very-long-binary-name": "a-very-long-bin"} {
		if got := agentComm(in); got != want {
			t.Errorf("agentComm(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProfileSection(t *testing.T) {
	r := testReport()
	if r.profileSection() != "" {
		t.Error("a section without profiles")
	}
	mk := func(key string, rps float64, us map[string]float64) Profile {
		return Profile{Path: key, Mode: modeClose, Backends: 8, Command: "perf record -e cpu-clock -a -g -F 999 -k CLOCK_MONOTONIC", RPS: rps, Requests: int(rps * 2), Seconds: 2, Hz: profileHz, Samples: 3000, Micros: us}
	}
	r.Profiles = []Profile{
		mk(keyNAT, 17000, map[string]float64{profXLB: 6.5, profNetfilter: 2.6, profAgent: 1.1, profRest: 84.1, profIdle: 8.2}),
		mk(keyFloor, 20000, map[string]float64{profFloor: 0.3, profNetfilter: 2.4, profAgent: 0.2, profRest: 83.5, profIdle: 6.8}),
		mk(keyNft, 15800, map[string]float64{profNetfilter: 10.5, profAgent: 0.4, profRest: 92.4, profIdle: 10.8}),
	}
	s := r.profileSection()
	for _, want := range []string{
		"| path | req/s | samples | xlb program | floor program | netfilter | xlb agent | rest | busy | idle |",
		"| xlb nat | 17000 | 3000 | 6.5 | 0.0 | 2.6 | 1.1 | 84.1 | 94.3 | 8.2 |",
		"| NAT floor | 20000 | 3000 | 0.0 | 0.3 | 2.4 | 0.2 | 83.5 | 86.4 | 6.8 |",
		"Over the floor's chain (86.4 µs busy per request), xlb nat's cost +7.9 µs: its XDP program +6.2 against the floor's, its agent +0.9, the rest +0.6.",
		"nftables DNAT's cost +16.9: netfilter +8.1, the rest +8.9",
		// 1.2 × 15800 = 18960; 86.4 × 20000 / 18960 = 91.1, 4.7 above
		// the floor's 86.4; xlb nat 94.3, 7.9 above it.
		"In these runs 1.2x nftables DNAT's rate is 18960 requests/s, and the floor, which keeps no state at all, reached 20000 (1.27x nftables DNAT).",
		"so 18960 requests/s allow 91.1 µs busy per request: 4.7 above the floor's. xlb nat's was 7.9 above it (its XDP program 6.5, its agent 1.1, besides the reaping of its sessions later), and it reached 17000 (1.08x nftables DNAT).",
		// (94.3 + 8.2) × 17000 / 2e6 = 87%; (86.4 + 6.8) × 20000 / 2e6 = 93%.
		"The samples of a run add up to 87-93% of the CPUs' time while it ran",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("profile section lacks\n%s\nin\n%s", want, s)
		}
	}
	if md := markdown(r, "bench/results/http-x.json", images{}); !strings.Contains(md, "**Where a new connection's CPU went.**") {
		t.Error("the document lacks the profile")
	}
}
