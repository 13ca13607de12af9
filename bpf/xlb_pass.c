// SPDX-License-Identifier: GPL-2.0
/* XDP_PASS and nothing else. A veth drops frames sent to it with XDP_TX or
 * bpf_redirect unless it has an XDP program of its own: the lab attaches
 * this one to the peer of every xlb node's veth. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xlb_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
