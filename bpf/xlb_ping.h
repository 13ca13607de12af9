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

#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129

/* Whether no reply may go to IPv6 source a (RFC 4443 2.2, RFC 4291 2.5):
 * the unspecified address, loopback, multicast, and IPv4-mapped ones
 * (which never come from the wire). */
static __always_inline int ping6_source_refused(const __be32 *a)
{
	__u32 w0 = bpf_ntohl(a[0]);

	if ((w0 >> 24) == 0xff)
		return 1;
	if (w0 | a[1])
		return 0;
	if (a[2] == bpf_htonl(0xffff))
		return 1;
	return !a[2] && (!a[3] || a[3] == bpf_htonl(1));
}

/* vip_ping for IPv6: turn an ICMPv6 echo request to a VIP (RFC 4443
 * 4.1) into its echo reply. Addresses swapped, hop limit XLB_OUTER_TTL,
 * type 129, and the checksum updated for the type alone: the
 * pseudo-header's sum does not change when its two addresses swap, nor
 * does its length. Unlike IPv4's, the update never meets the +0 case
 * (ping_all_zero): the pseudo-header's next header is 58, so the sum
 * the checksum covers is never all zero. Refused (dropped): a request
 * with extension headers (the reply would have to handle them; a
 * fragment is dropped before this) and one from a source no reply may go
 * to, or from a multicast Ethernet address. Out of line: xlb_lb6's call
 * chain has no stack for it inlined. Only echo requests are looked at:
 * neighbour discovery never reaches this. */
static __noinline enum ping_result vip_ping6(struct xdp_md *ctx, struct pkt6 *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);

	if ((void *)(ip6 + 1) > data_end || p->nexthdr != IPPROTO_ICMPV6)
		return PING_NOT_ECHO;
	__u32 off = p->l4_off;
	__u16 len = p->ip_len;
	__u8 *icmp = (void *)ip6 + off;

	if (past_datagram(icmp + 8, (void *)ip6 + len, data_end))
		return PING_NOT_ECHO;
	if (icmp[0] != ICMPV6_ECHO_REQUEST || icmp[1] != 0)
		return PING_NOT_ECHO;
	if (off != sizeof(*ip6) || ping6_source_refused(ip6->saddr) || (eth->h_source[0] & 1))
		return PING_REFUSED;

	unsigned char mac[ETH_ALEN];

	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);

#pragma unroll
	for (int i = 0; i < 4; i++) {
		__be32 a = ip6->saddr[i];

		ip6->saddr[i] = ip6->daddr[i];
		ip6->daddr[i] = a;
	}
	ip6->hop_limit = XLB_OUTER_TTL;

	/* HC' = ~(~HC + ~m + m') over the type and code word (RFC 1624). */
	__u16 *w = (__u16 *)icmp;
	__u16 m = w[0];

	icmp[0] = ICMPV6_ECHO_REPLY;
	w[1] = csum_fold((__u32)(__u16)~w[1] + (__u16)~m + w[0]);
	return PING_REPLY;
}

#endif
