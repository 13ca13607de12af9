/* Layer-2 mode: ARP replies and neighbour advertisements for the VIPs
 * this node owns, sent back out of the interface the request came in on
 * (docs/decisions/0009-layer2-arp.md). */
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

/* The ICMPv6 payload of the advertisement xlb_ndp sends: the message and
 * the target link-layer address option. */
#define XLB_NA_LEN (sizeof(struct nd_msg) + sizeof(struct nd_opt_lladdr))

/* A neighbour solicitation for an owned IPv6 VIP becomes, in place, the
 * solicited advertisement (RFC 4861 7.2.4): from the VIP at the owner's
 * MAC to the asker, flags S and O, with the target link-layer address
 * option. Returns the verdict, or -1 to leave the packet to the LB path
 * (and the kernel, which holds no VIP): not a valid solicitation (RFC
 * 4861 7.1.1: hop limit 255, code 0, at least 24 bytes, no extension
 * header, a unicast target), one from the unspecified address (duplicate
 * address detection: the VIP is no address the node would defend), or
 * not for an owned IPv6 VIP.
 * The solicitation's checksum is not verified: a corrupt one is answered
 * as the kernel would drop it, which costs nothing but the answer. Out
 * of line: the LB path's stack stays as it is. */
static __noinline int xlb_ndp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	struct nd_msg *nd = (void *)(ip6 + 1);

	if ((void *)(nd + 1) > data_end)
		return -1;
	if (ipv6_version(ip6) != 6 || ip6->nexthdr != IPPROTO_ICMPV6 || ip6->hop_limit != 255 ||
	    nd->type != ICMPV6_NS || nd->code != 0)
		return -1;
	__u16 plen = bpf_ntohs(ip6->payload_len);

	if (plen < sizeof(*nd) || (void *)(ip6 + 1) + plen > data_end)
		return -1;
	if (!(ip6->saddr[0] | ip6->saddr[1] | ip6->saddr[2] | ip6->saddr[3]) || (eth->h_source[0] & 1))
		return -1;
	/* An IPv4-mapped target is an IPv4 VIP's key in l2_owned, and a
	 * multicast one no unicast address: neither is asked for. */
	if ((!(nd->target[0] | nd->target[1]) && nd->target[2] == bpf_htonl(0xffff)) ||
	    (nd->target[0] & bpf_htonl(0xff000000)) == bpf_htonl(0xff000000))
		return -1;
	/* The target is the key as it is (union xlb_addr). */
	struct l2_owner *o = bpf_map_lookup_elem(&l2_owned, nd->target);

	if (!o)
		return -1;
	if (bpf_ktime_get_ns() >= o->expires) {
		count_reason(XLB_PASS_ARP_EXPIRED);
		return XDP_PASS;
	}

	__u8 to_mac[ETH_ALEN], mac[ETH_ALEN];
	__be32 to[4], vip[4];

	__builtin_memcpy(to_mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(mac, o->mac, ETH_ALEN);
	__builtin_memcpy(to, ip6->saddr, 16);
	__builtin_memcpy(vip, nd->target, 16);

	/* Exactly the advertisement: options and padding after the
	 * message's 24 bytes go, the target's option takes their place. */
	long have = data_end - data;
	long want = sizeof(*eth) + sizeof(*ip6) + XLB_NA_LEN;

	asm volatile("" : "+r"(have));
	if (have != want && bpf_xdp_adjust_tail(ctx, (int)(want - have)))
		return drop(XLB_DROP_ENCAP_FAILED);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip6 = (void *)(eth + 1);
	nd = (void *)(ip6 + 1);
	struct nd_opt_lladdr *opt = (void *)(nd + 1);

	if ((void *)(opt + 1) > data_end)
		return drop(XLB_DROP_ENCAP_FAILED);

	__builtin_memcpy(eth->h_dest, to_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	ip6->vtf = bpf_htonl(0x60000000);
	ip6->payload_len = bpf_htons(XLB_NA_LEN);
	ip6->hop_limit = 255;
	__builtin_memcpy(ip6->saddr, vip, 16);
	__builtin_memcpy(ip6->daddr, to, 16);
	nd->type = ICMPV6_NA;
	nd->code = 0;
	nd->checksum = 0;
	nd->flags = bpf_htonl(0x60000000); /* solicited, override */
	opt->type = 2;
	opt->len = 1;
	__builtin_memcpy(opt->mac, mac, ETH_ALEN);

	__u32 sum = icmp6_pseudo_sum(ip6->saddr, ip6->daddr, XLB_NA_LEN);
	__u16 *w = (__u16 *)nd;

#pragma unroll
	for (int i = 0; i < (int)XLB_NA_LEN / 2; i++)
		sum += w[i];
	nd->checksum = csum_fold(sum);
	count_reason(XLB_TX_ND_ADVERT);
	return XDP_TX;
}

#endif
