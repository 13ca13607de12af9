/* Layer-2 mode: ARP replies for the VIPs this node owns, sent back out of
 * the interface the request came in on (docs/decisions/0009-layer2-arp.md). */
#ifndef XLB_ARP_H
#define XLB_ARP_H

#include "xlb_maps.h"

enum arp_result {
	ARP_NOT_OURS = 0, /* not an Ethernet/IPv4 request for an owned VIP */
	ARP_REPLY,        /* turned into the reply in place: XDP_TX */
	ARP_EXPIRED,      /* owned, but the agent stopped refreshing it */
};

/* eth is the frame's Ethernet header, with h_proto ETH_P_ARP. A request
 * for an owned VIP becomes its reply: from the owner's MAC, to the
 * asker's. Anything else (replies, other hardware, short frames) is left
 * to the kernel, which has no VIP and so answers none. */
static __always_inline enum arp_result xlb_arp(struct ethhdr *eth, void *data_end)
{
	struct arp_eth4 *arp = (void *)(eth + 1);

	if ((void *)(arp + 1) > data_end)
		return ARP_NOT_OURS;
	if (arp->htype != bpf_htons(ARPHRD_ETHER) || arp->ptype != bpf_htons(ETH_P_IP) ||
	    arp->hlen != ETH_ALEN || arp->plen != 4 || arp->oper != bpf_htons(ARPOP_REQUEST))
		return ARP_NOT_OURS;
	/* A sender MAC that is multicast (broadcast included) has no one to
	 * answer to. */
	if (arp->sha[0] & 1)
		return ARP_NOT_OURS;

	__be32 vip = arp->tpa;
	struct l2_owner *o = lookup_addr4(&l2_owned, vip);

	if (!o)
		return ARP_NOT_OURS;
	if (bpf_ktime_get_ns() >= o->expires)
		return ARP_EXPIRED;

	__builtin_memcpy(eth->h_dest, arp->sha, ETH_ALEN);
	__builtin_memcpy(eth->h_source, o->mac, ETH_ALEN);
	arp->oper = bpf_htons(ARPOP_REPLY);
	__builtin_memcpy(arp->tha, arp->sha, ETH_ALEN);
	arp->tpa = arp->spa;
	__builtin_memcpy(arp->sha, o->mac, ETH_ALEN);
	arp->spa = vip;
	return ARP_REPLY;
}

#endif
