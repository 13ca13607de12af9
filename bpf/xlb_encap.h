/* Outer headers: IPIP and GUE, and the ICMP fragmentation-needed reply. */
#ifndef XLB_ENCAP_H
#define XLB_ENCAP_H

#include "xlb_helpers.h"

/* Bytes the outer headers of mode add. With mode a constant, a constant. */
static __always_inline int encap_overhead(__u8 mode)
{
	if (mode == XLB_ENCAP_GUE_HINT)
		return XLB_GUE_HINT_OVERHEAD;
	if (mode == XLB_ENCAP_GUE)
		return XLB_GUE_OVERHEAD;
	return XLB_IPIP_OVERHEAD;
}

static __always_inline int encap_is_gue(__u8 mode)
{
	return mode == XLB_ENCAP_GUE || mode == XLB_ENCAP_GUE_HINT;
}

/* encap_overhead with an outer header of either family: over IPv6 the
 * header is longer, and so is the hint (struct xlb_gue_hint6). */
static __always_inline int encap_overhead_x(__u8 mode, int outer6)
{
	if (!outer6)
		return encap_overhead(mode);
	return encap_overhead(mode) + XLB_OUTER6_EXTRA +
	       (mode == XLB_ENCAP_GUE_HINT ? XLB_GUE_HINT6_EXTRA : 0);
}

/* Fill an outer (or reply) IPv4 header of 20 bytes, checksum included:
 * what every header the program writes from nothing has in common. */
static __always_inline void ipv4_header(struct iphdr *ip, __u8 tos, __u16 tot_len, __be16 df,
					__u8 proto, __be32 saddr, __be32 daddr)
{
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = tos;
	ip->tot_len = bpf_htons(tot_len);
	ip->id = 0;
	ip->frag_off = df;
	ip->ttl = XLB_OUTER_TTL;
	ip->protocol = proto;
	ip->saddr = saddr;
	ip->daddr = daddr;
	ip->check = 0;
	ip->check = ipv4_csum(ip);
}

/* Prepend the outer headers in front of the IPv4 packet, behind a new
 * Ethernet header: macs (destination then source, three words) when
 * given, else the frame's own header moved to the new front (a packet
 * the kernel is to forward keeps the node's MAC as destination). hint is
 * read in mode XLB_ENCAP_GUE_HINT only. Returns 0 or -1 when there is no
 * headroom. The addresses are written here rather than over the moved
 * header afterwards: that copy may overlap the new IP header and went
 * byte by byte (docs/decisions/0001-lb-fast-path.md). */
static __always_inline int encap_ipv4(struct xdp_md *ctx, __u8 mode, __be32 saddr, __be32 daddr,
				      __u32 hash, __u16 inner_len, __u8 tos, __be16 df,
				      const struct xlb_gue_hint *hint, const __u32 *macs)
{
	int overhead = encap_overhead(mode);
	void *data, *data_end;
	struct ethhdr *eth, *old_eth;
	struct iphdr *ip;

	if (bpf_xdp_adjust_head(ctx, -overhead))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return -1;
	if (macs) {
		__u32 *w = (__u32 *)eth;

		w[0] = macs[0];
		w[1] = macs[1];
		w[2] = macs[2];
		eth->h_proto = bpf_htons(ETH_P_IP);
	} else {
		old_eth = data + overhead;
		if ((void *)(old_eth + 1) > data_end)
			return -1;
		__builtin_memcpy(eth, old_eth, sizeof(*eth));
	}

	ipv4_header(ip, tos, inner_len + overhead, df, encap_is_gue(mode) ? IPPROTO_UDP : IPPROTO_IPIP,
		    saddr, daddr);

	if (encap_is_gue(mode)) {
		struct udphdr *udp = (void *)(ip + 1);
		struct guehdr *gue = (void *)(udp + 1);

		if ((void *)(gue + 1) > data_end)
			return -1;
		/* Per-flow source port in the ephemeral range: backends spread
		 * flows over their RX queues by it. Checksum 0: allowed for
		 * UDP over IPv4, the inner packet has its own. */
		udp->source = bpf_htons(0xc000 | (hash & 0x3fff));
		udp->dest = bpf_htons(XLB_GUE_PORT);
		udp->len = bpf_htons(inner_len + overhead - sizeof(*ip));
		udp->check = 0;
		gue->hlen_c_ver = 0;
		gue->proto = IPPROTO_IPIP;
		gue->flags = 0;
		if (mode == XLB_ENCAP_GUE_HINT) {
			struct xlb_gue_hint *h = (void *)(gue + 1);

			if ((void *)(h + 1) > data_end)
				return -1;
			/* ver 0, C 0: hlen is the whole byte. */
			gue->hlen_c_ver = XLB_GUE_HINT_WORDS;
			*h = *hint;
		}
	}
	return 0;
}

/* encap_ipv4 for the pairs that involve IPv6 (see the matrix in
 * docs/decisions/0008-ipv6-data-plane.md): the inner packet of either
 * family (inner6) in an outer header of either family (outer6), IPIP or
 * GUE. The outer source is saddr6 / saddr4 and the destination daddr
 * (IPv4-mapped for an IPv4 outer). An IPv6 outer header carries the
 * inner traffic class and 20 bits of the flow hash as its flow label, so
 * that routers spread flows as they would by ports; GUE over IPv6 sends
 * a zero UDP checksum, which RFC 6935 allows for tunnels (the inner
 * packet has its own). In mode XLB_ENCAP_GUE_HINT the GUE header carries
 * the hint in the outer header's family: struct xlb_gue_hint over IPv4,
 * struct xlb_gue_hint6 over IPv6 (hint points to it). Returns 0 or -1. */
static __always_inline int encap_any(struct xdp_md *ctx, __u8 mode, int outer6, int inner6,
				     __be32 saddr4, const volatile union xlb_addr *saddr6,
				     const union xlb_addr *daddr, __u32 hash, __u16 inner_len,
				     __u8 tos, __be16 df, const __u32 *macs, const void *hint)
{
	int overhead = encap_overhead_x(mode, outer6);
	int outer_hdr = outer6 ? (int)sizeof(struct ipv6hdr) : (int)sizeof(struct iphdr);
	__u8 inner_proto = inner6 ? IPPROTO_IPV6 : IPPROTO_IPIP;
	__u8 proto = encap_is_gue(mode) ? IPPROTO_UDP : inner_proto;
	void *data, *data_end, *l4;
	struct ethhdr *eth, *old_eth;

	if (bpf_xdp_adjust_head(ctx, -overhead))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) + sizeof(struct ipv6hdr) > data_end)
		return -1;
	if (macs) {
		__u32 *w = (__u32 *)eth;

		w[0] = macs[0];
		w[1] = macs[1];
		w[2] = macs[2];
	} else {
		old_eth = data + overhead;
		if ((void *)(old_eth + 1) > data_end)
			return -1;
		__builtin_memcpy(eth, old_eth, 12);
	}
	eth->h_proto = bpf_htons(outer6 ? ETH_P_IPV6 : ETH_P_IP);

	if (outer6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		ip6->vtf = bpf_htonl(0x60000000 | ((__u32)tos << 20) | (hash & 0xfffff));
		ip6->payload_len = bpf_htons(inner_len + overhead - sizeof(*ip6));
		ip6->nexthdr = proto;
		ip6->hop_limit = XLB_OUTER_TTL;
		ip6->saddr[0] = saddr6->w[0];
		ip6->saddr[1] = saddr6->w[1];
		ip6->saddr[2] = saddr6->w[2];
		ip6->saddr[3] = saddr6->w[3];
		__builtin_memcpy(ip6->daddr, daddr, 16);
		l4 = ip6 + 1;
	} else {
		struct iphdr *ip = (void *)(eth + 1);

		ipv4_header(ip, tos, inner_len + overhead, df, proto, saddr4, daddr->w[3]);
		l4 = ip + 1;
	}

	if (encap_is_gue(mode)) {
		struct udphdr *udp = l4;
		struct guehdr *gue = (void *)(udp + 1);

		if ((void *)(gue + 1) > data_end)
			return -1;
		udp->source = bpf_htons(0xc000 | (hash & 0x3fff));
		udp->dest = bpf_htons(XLB_GUE_PORT);
		udp->len = bpf_htons(inner_len + overhead - outer_hdr);
		udp->check = 0;
		gue->hlen_c_ver = 0;
		gue->proto = inner_proto;
		gue->flags = 0;
		if (mode == XLB_ENCAP_GUE_HINT && hint && outer6) {
			struct xlb_gue_hint6 *h = (void *)(gue + 1);

			if ((void *)(h + 1) > data_end)
				return -1;
			gue->hlen_c_ver = XLB_GUE_HINT6_WORDS; /* ver 0, C 0 */
			*h = *(const struct xlb_gue_hint6 *)hint;
		} else if (mode == XLB_ENCAP_GUE_HINT && hint) {
			struct xlb_gue_hint *h = (void *)(gue + 1);

			if ((void *)(h + 1) > data_end)
				return -1;
			gue->hlen_c_ver = XLB_GUE_HINT_WORDS; /* ver 0, C 0 */
			*h = *(const struct xlb_gue_hint *)hint;
		}
	}
	return 0;
}

/* Turn the frame into an ICMP "fragmentation needed" (type 3 code 4) back
 * to the sender, quoting its IP header and 8 bytes, as a router on the
 * path would (RFC 792, RFC 1191). The reply leaves by XDP_TX, back
 * through the hop the packet came from. Returns 0 or -1. */
static __always_inline int icmp_frag_needed(struct xdp_md *ctx, __be32 saddr, __u16 mtu)
{
	const int add = sizeof(struct iphdr) + sizeof(struct icmphdr_frag);
	void *data, *data_end;
	struct ethhdr *eth, *old_eth;
	struct iphdr *ip, *orig;
	struct icmphdr_frag *icmp;
	__u32 quote, ihl, sum;
	unsigned char mac[ETH_ALEN];

	if (bpf_xdp_adjust_head(ctx, -add))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip = (void *)(eth + 1);
	icmp = (void *)(ip + 1);
	orig = (void *)(icmp + 1);
	old_eth = data + add;
	if ((void *)(orig + 1) > data_end)
		return -1;
	ihl = orig->ihl;
	if (ihl < 5)
		return -1;
	quote = ihl * 4 + 8;
	if ((void *)orig + quote > data_end)
		return -1;

	__builtin_memcpy(mac, old_eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, old_eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	ipv4_header(ip, 0, add + quote, 0, IPPROTO_ICMP, saddr, orig->saddr);

	icmp->type = ICMP_DEST_UNREACH;
	icmp->code = ICMP_FRAG_NEEDED;
	icmp->checksum = 0;
	icmp->unused = 0;
	icmp->mtu = bpf_htons(mtu);

	/* ICMP checksum over header and quote: at most 8 + 60 + 8 bytes, in
	 * 16-bit words (quote is a multiple of 4). */
	sum = 0;
	__u16 *w = (__u16 *)icmp;
#pragma unroll
	for (int i = 0; i < (8 + 60 + 8) / 2; i++) {
		if (i >= (8 + quote) / 2)
			break;
		if ((void *)(w + i + 1) > data_end)
			return -1;
		sum += w[i];
	}
	icmp->checksum = csum_fold(sum);

	/* Trim everything after the quote. */
	int excess = (int)(data_end - ((void *)orig + quote));
	if (excess > 0 && bpf_xdp_adjust_tail(ctx, -excess))
		return -1;
	return 0;
}

/* The ICMPv6 checksum's pseudo-header part (RFC 8200 8.1): both
 * addresses, the upper-layer length and next header 58, unfolded. */
static __always_inline __u32 icmp6_pseudo_sum(const __be32 *src, const __be32 *dst, __u32 len)
{
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		sum += (src[i] & 0xffff) + (src[i] >> 16);
		sum += (dst[i] & 0xffff) + (dst[i] >> 16);
	}
	return sum + bpf_htons(len) + bpf_htons(IPPROTO_ICMPV6);
}

/* icmp_frag_needed for IPv6: turn the frame (an IPv6 packet too big for
 * the tunnel) into an ICMPv6 Packet Too Big (RFC 4443 3.2) from saddr
 * back to its sender, quoting the first XLB_ICMP6_QUOTE bytes of it (or
 * all of it, when shorter, less an odd last byte), as a router on the
 * path would. The reply
 * leaves by XDP_TX. Returns 0 or -1. */
static __always_inline int icmp6_too_big(struct xdp_md *ctx, const volatile union xlb_addr *saddr,
					 __u32 mtu, __u16 inner_len)
{
	const int add = sizeof(struct ipv6hdr) + sizeof(struct icmp6hdr_too_big);
	void *data, *data_end;
	struct ethhdr *eth, *old_eth;
	struct ipv6hdr *ip6, *orig;
	struct icmp6hdr_too_big *icmp;
	__u32 quote = inner_len < XLB_ICMP6_QUOTE ? inner_len & ~1u : XLB_ICMP6_QUOTE;

	if (bpf_xdp_adjust_head(ctx, -add))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip6 = (void *)(eth + 1);
	icmp = (void *)(ip6 + 1);
	orig = (void *)(icmp + 1);
	old_eth = data + add;
	if ((void *)(orig + 1) > data_end || quote < sizeof(*orig))
		return -1;

	/* New and old Ethernet headers do not overlap (add > 14). */
	__builtin_memcpy(eth->h_dest, old_eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, old_eth->h_dest, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IPV6);

	ip6->vtf = bpf_htonl(0x60000000);
	ip6->payload_len = bpf_htons(sizeof(*icmp) + quote);
	ip6->nexthdr = IPPROTO_ICMPV6;
	ip6->hop_limit = XLB_OUTER_TTL;
	/* The new headers end where the original packet's begins: its
	 * source is intact. */
	ip6->saddr[0] = saddr->w[0];
	ip6->saddr[1] = saddr->w[1];
	ip6->saddr[2] = saddr->w[2];
	ip6->saddr[3] = saddr->w[3];
	__builtin_memcpy(ip6->daddr, orig->saddr, 16);

	icmp->type = ICMPV6_PKT_TOOBIG;
	icmp->code = 0;
	icmp->checksum = 0;
	icmp->mtu = bpf_htonl(mtu);

	/* At most 620 words: the 32-bit sum cannot overflow. */
	__u32 sum = icmp6_pseudo_sum(ip6->saddr, ip6->daddr, sizeof(*icmp) + quote);
	__u16 *w = (__u16 *)icmp;
	__u32 words = (8 + quote) / 2;

	/* A loop the verifier walks rather than one unrolled: unrolled,
	 * its spills took more stack than the call chain has. Two bytes a
	 * step, as the quote may end on any even byte; a Packet Too Big is
	 * rare, and its sender is waiting for it. */
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < (8 + XLB_ICMP6_QUOTE) / 2; i++) {
		if (i >= words)
			break;
		__u16 *at = w + i;

		/* Keep the compiler from hoisting the bound out of the loop
		 * as arithmetic on data_end, which the verifier refuses. */
		asm volatile("" : "+r"(at));
		if ((void *)(at + 1) > data_end)
			return -1;
		sum += *at;
	}
	icmp->checksum = csum_fold(sum);

	long avail = data_end - (void *)orig;

	/* 64-bit pointer arithmetic only (see xlb_forward_x). */
	asm volatile("" : "+r"(avail));
	int excess = (int)avail - (int)quote;
	if (excess > 0 && bpf_xdp_adjust_tail(ctx, -excess))
		return -1;
	return 0;
}

#endif
