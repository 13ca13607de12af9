/* ICMP echo requests to a VIP, answered by the LB node itself (load-time
 * parameter ping_vips): the VIP lives on the backends' lo only, and a
 * request the node passed up would be routed back to the router. Only
 * the slow path for ICMP to a VIP reaches this. */
#ifndef XLB_PING_H
#define XLB_PING_H

#include "xlb_parse.h"

#define ICMP_ECHOREPLY 0
#define ICMP_ECHO 8

/* What vip_ping did. */
enum ping_result {
	PING_NOT_ECHO = 0, /* no echo request: treated as before */
	PING_REPLY,        /* turned into its reply, to be sent with XDP_TX */
	PING_REFUSED,      /* an echo request the node does not answer: drop it */
};

/* Whether no reply may go to source address a (RFC 1122, 3.2.2.6 and
 * 3.2.1.3): "this network" 0/8, loopback 127/8, multicast 224/4 and
 * the reserved 240/4 with the limited broadcast 255.255.255.255. A
 * subnet's directed broadcast looks like a host address here; the
 * router in front of the node does not forward those. */
static __always_inline int ping_source_refused(__be32 a)
{
	__u32 first = bpf_ntohl(a) >> 24;

	return first == 0 || first == 127 || first >= 224;
}

/* How far ping_all_zero looks: past the largest frame XDP hands a program
 * without fragments. */
#define XLB_PING_SCAN 4096

/* Whether the bytes [b, end) are all zero. The only case where an
 * incrementally updated checksum is wrong: an echo whose identifier,
 * sequence number and data are all zero sums to +0, and its checksum is
 * 0xffff, which the update cannot tell from 0x0000 (RFC 1624, 3). Only a
 * reply whose updated checksum is 0 asks, so the loop costs no real ping
 * anything. */
static __noinline int ping_all_zero(__u8 *b, void *end, void *data_end)
{
	for (int i = 0; i < XLB_PING_SCAN / 8; i++) {
		__u64 *w = (__u64 *)b;

		if ((void *)(w + 1) > end || (void *)(w + 1) > data_end)
			break;
		if (*w)
			return 0;
		b += 8;
	}
	for (int i = 0; i < 8; i++) {
		if ((void *)(b + 1) > end || (void *)(b + 1) > data_end)
			return 1;
		if (*b)
			return 0;
		b++;
	}
	return 0;
}

/* Turn an ICMP echo request to a VIP into its echo reply, to go back
 * where it came from: Ethernet and IP addresses swapped, type 0, the
 * ICMP checksum updated for the type alone (RFC 1624: the payload is
 * echoed untouched, whatever its size, so the reply is never larger than
 * the request), TTL XLB_OUTER_TTL and the IP checksum computed anew. A
 * request the node will not answer is dropped under its own reason: a
 * fragment (the node does not reassemble), one with IP options (the
 * reply would have to handle them, RFC 1122 3.2.2.6), and one from a
 * source no reply may go to. */
static __always_inline enum ping_result vip_ping(struct pkt *p, void *data_end)
{
	struct iphdr *ip = p->ip;
	__u8 *icmp = (void *)ip + ip->ihl * 4;

	if (ip->protocol != IPPROTO_ICMP || (ip->frag_off & bpf_htons(IP_OFFSET)))
		return PING_NOT_ECHO;
	if (past_datagram(icmp + 8, (void *)ip + p->ip_len, data_end))
		return PING_NOT_ECHO;
	if (icmp[0] != ICMP_ECHO || icmp[1] != 0)
		return PING_NOT_ECHO;
	if (p->fragment || p->options || ping_source_refused(ip->saddr) ||
	    (p->eth->h_source[0] & 1))
		return PING_REFUSED;

	struct ethhdr *eth = p->eth;
	unsigned char mac[ETH_ALEN];

	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);

	__be32 vip = ip->daddr;

	ip->daddr = ip->saddr;
	ip->saddr = vip;
	ip->ttl = XLB_OUTER_TTL;
	ip->check = 0;
	ip->check = ipv4_csum(ip);

	/* HC' = ~(~HC + ~m + m') over the type and code word, m' = 0. */
	__u16 *w = (__u16 *)icmp;
	__u32 sum = (__u16)~w[1] + (__u16)~w[0];

	icmp[0] = ICMP_ECHOREPLY;
	w[1] = csum_fold(sum + w[0]);
	if (!w[1] && ping_all_zero(icmp + 4, (void *)ip + p->ip_len, data_end))
		w[1] = 0xffff;
	return PING_REPLY;
}

#endif
