// SPDX-License-Identifier: GPL-2.0
/* xlb backend programs, on a backend host's interface.
 *
 * XDP (xlb_decap, xlb_decap.h) strips the IPIP or GUE header that an xlb
 * node added. Tunnelled to this host, the inner packet's destination is a
 * VIP configured on this host (on lo), and the stack takes it as it is.
 * Tunnelled to a local pod (Kubernetes mode, xlb_nat.h), the inner
 * destination VIP:port becomes the pod's address and target port first.
 * A TCP packet to a VIP whose GUE header carries a daisy-chain hint and
 * that no local socket takes may go on to the previous owner instead,
 * when it comes from a known xlb node and names a known previous owner
 * (xlb_chain.h). TC egress (xlb_nat_reply, xlb_nat.h) turns the pods'
 * replies back into VIP:port. Everything else passes untouched. The maps
 * are in xlb_backend_maps.h. */
#include "xlb_decap.h"
#include "xlb_nat.h"

SEC("xdp")
int xlb_decap(struct xdp_md *ctx)
{
	return decap(ctx);
}

SEC("tc")
int xlb_nat_reply(struct __sk_buff *skb)
{
	return nat_reply(skb);
}

char LICENSE[] SEC("license") = "GPL";
