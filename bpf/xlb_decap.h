/* Decapsulation on a backend host: IP-in-IP and GUE from an xlb node,
 * over IPv4 or IPv6, with IPv4 or IPv6 inside, to a local VIP, or
 * (Kubernetes mode) a local pod of the inner packet's family. */
#ifndef XLB_DECAP_H
#define XLB_DECAP_H

#include "xlb_backend_maps.h"
#include "xlb_nat.h"
#include "xlb_chain.h"

static __always_inline int verdict(__u32 stat, __u64 bytes, int v)
{
	struct xlb_counter *c = bpf_map_lookup_elem(&decap_stats, &stat);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
	return v;
}

/* A tunnel to this host or a local pod that is not what an xlb node
 * sends: dropped, and counted where its mode counts malformed packets. */
static __always_inline int drop_malformed(int to_pod)
{
	if (to_pod) {
		nat_count(NAT_DROP_MALFORMED, 0);
		return XDP_DROP;
	}
	return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
}

/* Move the Ethernet header forward over the outer headers, then advance
 * the packet start to it. Returns 0 or -1. */
static __always_inline int strip_outer(struct xdp_md *ctx, struct ethhdr *eth, __u32 strip,
				       void *data_end)
{
	struct ethhdr *neth = (void *)eth + strip;

	if ((void *)(neth + 1) > data_end)
		return -1;
	__builtin_memmove(neth, eth, sizeof(*eth));
	return bpf_xdp_adjust_head(ctx, (int)strip) ? -1 : 0;
}

/* An IPv6 address that is IPv4-mapped (::ffff:a.b.c.d): as union
 * xlb_addr holds IPv4 addresses, an IPv6 header naming one would match an
 * IPv4 key. No tunnel of xlb's carries one. */
static __always_inline int addr6_mapped(const __be32 *a)
{
	return !a[0] && !a[1] && a[2] == bpf_htonl(0xffff);
}

static __always_inline void *lookup_addr6(void *map, const __be32 *a)
{
	union xlb_addr k;

	__builtin_memcpy(k.w, a, sizeof(k.w));
	return bpf_map_lookup_elem(map, &k);
}

/* The GUE header at gue: the family of the packet it carries (4 or 6; 0:
 * none we parse, a control message or another protocol), with *len the
 * bytes from gue to that packet and *hlen the words of private data
 * (which may be a daisy-chain hint: chain_read). Variant 1 has no GUE
 * header: the IP header follows the UDP header, its version in the bits
 * GUE's variant takes. */
static __always_inline int gue_parse(struct guehdr *gue, __u32 *len, __u8 *hlen)
{
	*hlen = gue->hlen_c_ver & 0x1f;

	switch (gue->hlen_c_ver >> 6) {
	case 0: /* variant 0: control bit clear, IPv4 or IPv6 inside */
		if (gue->hlen_c_ver & 0x20)
			return 0;
		*len = sizeof(*gue) + *hlen * 4;
		if (gue->proto == IPPROTO_IPIP)
			return 4;
		if (gue->proto == IPPROTO_IPV6)
			return 6;
		return 0;
	case 1: /* variant 1: the IP header follows the UDP header */
		*len = 0;
		*hlen = 0;
		if ((gue->hlen_c_ver >> 4) == 4)
			return 4;
		if ((gue->hlen_c_ver >> 4) == 6)
			return 6;
		return 0;
	}
	return 0;
}

/* The longest outer header: IPv6 with the extension headers skipped,
 * UDP, GUE with 31 words of private data. */
#define XLB_DECAP_EXT_HDRS 2
#define XLB_DECAP_MAX_STRIP (40 + XLB_DECAP_EXT_HDRS * 2048 + 8 + 4 + 31 * 4)

/* The inner packet of a tunnel to this host or a local pod, of family 4
 * or 6, strip bytes after the outer header at l3, whose datagram is
 * outer_len bytes long: checked, then translated for the pod, chained or
 * delivered as it is. ip is the outer header when it is IPv4 (0: IPv6),
 * which is when an IPv4 pod is translated for; pod6 the IPv6 pod a tunnel
 * over IPv6 is for (0: none). A pod is translated for in its own family.
 * co is the tunnel's daisy-chain hint (0: none to follow). */
static __always_inline int decap_inner(struct xdp_md *ctx, struct ethhdr *eth, void *l3,
				       struct iphdr *ip, __u32 strip, __u32 outer_len, int family,
				       __u32 stat, struct chain_outer *co, int to_pod,
				       const union xlb_addr *pod6, void *data_end)
{
	struct iphdr *inner;
	struct ipv6hdr *inner6;
	__u32 inner_len;

	if (strip > XLB_DECAP_MAX_STRIP)
		return drop_malformed(to_pod);
	/* The inner packet must lie within the outer datagram, which lies
	 * within the frame: nothing after it travels on. */
	if (family == 6) {
		inner6 = l3 + strip;
		if ((void *)(inner6 + 1) > data_end || ipv6_version(inner6) != 6)
			return drop_malformed(to_pod);
		inner_len = sizeof(*inner6) + bpf_ntohs(inner6->payload_len);
		if (strip + inner_len > outer_len)
			return drop_malformed(to_pod);
		if (to_pod) {
			union xlb_addr pod;
			int r;

			/* An IPv6 VIP is translated for an IPv6 pod only. */
			if (!pod6) {
				nat_count(NAT_DROP_NO_ENTRY, 0);
				return XDP_DROP;
			}
			pod = *pod6;
			if (co) {
				int v = chain_decide_pod6(ctx, eth, co, inner6, inner_len, data_end, &pod);

				if (v != CHAIN_DELIVER)
					return v;
			}
			r = nat_forward6(data_end, inner6, inner_len, &pod);
			if (r != NAT_FWD && r != NAT_FWD_ICMP) {
				nat_count(r, 0);
				return XDP_DROP;
			}
			eth->h_proto = bpf_htons(ETH_P_IPV6);
			if (strip_outer(ctx, eth, strip, data_end))
				return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
			nat_count(r, inner_len);
			return verdict(stat, inner_len, XDP_PASS);
		}
		if (addr6_mapped(inner6->daddr) || !lookup_addr6(&decap_vips, inner6->daddr))
			return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
		if (co) {
			int v = chain_decide6(ctx, eth, co, inner6, inner_len, data_end);

			if (v != CHAIN_DELIVER)
				return v;
		}
		/* The stack takes the inner packet as it came: tell it its
		 * family, which may differ from the outer one. */
		eth->h_proto = bpf_htons(ETH_P_IPV6);
		if (strip_outer(ctx, eth, strip, data_end))
			return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
		return verdict(stat, inner_len, XDP_PASS);
	}

	inner = l3 + strip;
	if ((void *)(inner + 1) > data_end || inner->version != 4 || inner->ihl < 5)
		return drop_malformed(to_pod);
	inner_len = bpf_ntohs(inner->tot_len);
	if (inner_len < inner->ihl * 4 || strip + inner_len > outer_len)
		return drop_malformed(to_pod);

	if (to_pod && ip) {
		__be32 pod = ip->daddr;
		int r;

		if (co && inner->protocol == IPPROTO_TCP) {
			int v = chain_decide_pod(ctx, eth, co, inner, inner_len, data_end, &pod);

			if (v != CHAIN_DELIVER)
				return v;
		}
		r = nat_forward(data_end, inner, pod);

		if (r != NAT_FWD && r != NAT_FWD_ICMP) {
			nat_count(r, 0);
			return XDP_DROP;
		}
		if (strip_outer(ctx, eth, strip, data_end))
			return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
		nat_count(r, inner_len);
		return verdict(stat, inner_len, XDP_PASS);
	}
	if (to_pod) {
		/* An IPv4 VIP is translated for an IPv4 pod only. */
		nat_count(NAT_DROP_NO_ENTRY, 0);
		return XDP_DROP;
	}

	if (!lookup_addr4(&decap_vips, inner->daddr))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	if (co && inner->protocol == IPPROTO_TCP) {
		int v = chain_decide(ctx, eth, co, inner, inner_len, data_end);

		if (v != CHAIN_DELIVER)
			return v;
	}
	eth->h_proto = bpf_htons(ETH_P_IP);
	if (strip_outer(ctx, eth, strip, data_end))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	return verdict(stat, inner_len, XDP_PASS);
}

/* Frames that are not a tunnel to this host or a local pod reach the
 * stack exactly as they would without xlb, malformed ones included: the
 * stack checks IP headers itself (and counts what it rejects). A tunnel
 * to us is ours to check: the outer length must fit the frame and the
 * inner packet the outer datagram, or it is dropped. */
static __always_inline int decap4(struct xdp_md *ctx, struct ethhdr *eth, void *data_end)
{
	struct iphdr *ip = (void *)(eth + 1);
	struct guehdr *gue = 0;
	struct chain_outer co, *hinted = 0;
	__u32 strip = sizeof(*ip), glen = 0, stat, outer_len;
	int family, to_pod = 0;
	__u8 hlen = 0;

	/* xlb's outer header is 20 bytes, version 4, no options. */
	if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->version != 4)
		return verdict(DECAP_PASS, 0, XDP_PASS);
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		/* The stack reassembles; our encapsulation never fragments. */
		return verdict(DECAP_PASS, 0, XDP_PASS);

	if (ip->protocol == IPPROTO_IPIP) {
		family = 4;
		stat = DECAP_IPIP;
	} else if (ip->protocol == IPPROTO_IPV6) {
		family = 6;
		stat = DECAP_IPIP;
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *udp = (void *)(ip + 1);

		gue = (void *)(udp + 1);
		if ((void *)(gue + 1) > data_end || udp->dest != bpf_htons(XLB_GUE_PORT))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		family = 0; /* parsed below, once the destination is known to be local */
		stat = DECAP_GUE;
	} else {
		return verdict(DECAP_PASS, 0, XDP_PASS);
	}
	/* Only tunnels get this far, so other traffic costs no lookup. */
	if (!lookup_addr4(&host_addrs, ip->daddr)) {
		if (!lookup_addr4(&nat_pods, ip->daddr))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		to_pod = 1;
	}
	/* Ethernet padding may follow the datagram; a datagram longer than
	 * the frame lost its end. */
	outer_len = bpf_ntohs(ip->tot_len);
	if ((void *)ip + outer_len > data_end)
		return drop_malformed(to_pod);

	if (gue) {
		family = gue_parse(gue, &glen, &hlen);
		if (!family)
			return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
		strip = sizeof(*ip) + sizeof(struct udphdr) + glen;
		if (chain_read(&co, ip, 0, (void *)(ip + 1), gue + 1, hlen, data_end))
			hinted = &co;
	}
	return decap_inner(ctx, eth, ip, ip, strip, outer_len, family, stat, hinted, to_pod, 0,
			   data_end);
}

/* The same for an IPv6 outer header, after the extension headers that
 * carry options only (hop-by-hop first, then destination options); any
 * other (routing, fragment, ...) leaves the packet to the stack. */
static __always_inline int decap6(struct xdp_md *ctx, struct ethhdr *eth, void *data_end)
{
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	struct guehdr *gue = 0;
	struct chain_outer co, *hinted = 0;
	__u32 off = sizeof(*ip6), strip, glen = 0, stat, outer_len;
	union xlb_addr pod;
	int family, to_pod = 0;
	__u8 nh, hlen = 0;

	if ((void *)(ip6 + 1) > data_end || ipv6_version(ip6) != 6)
		return verdict(DECAP_PASS, 0, XDP_PASS);
	nh = ip6->nexthdr;
#pragma unroll
	for (int i = 0; i < XLB_DECAP_EXT_HDRS; i++) {
		struct ipv6_opt_hdr *opt;

		if (!(nh == IPPROTO_HOPOPTS && i == 0) && nh != IPPROTO_DSTOPTS)
			break;
		opt = (void *)ip6 + off;
		if ((void *)(opt + 1) > data_end)
			return verdict(DECAP_PASS, 0, XDP_PASS);
		nh = opt->nexthdr;
		off += (opt->hdrlen + 1) * 8;
	}

	if (nh == IPPROTO_IPV6) {
		family = 6;
		stat = DECAP_IPIP;
	} else if (nh == IPPROTO_IPIP) {
		family = 4;
		stat = DECAP_IPIP;
	} else if (nh == IPPROTO_UDP) {
		struct udphdr *udp = (void *)ip6 + off;

		gue = (void *)(udp + 1);
		if ((void *)(gue + 1) > data_end || udp->dest != bpf_htons(XLB_GUE_PORT))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		family = 0;
		stat = DECAP_GUE;
	} else {
		return verdict(DECAP_PASS, 0, XDP_PASS);
	}
	if (addr6_mapped(ip6->daddr))
		return verdict(DECAP_PASS, 0, XDP_PASS);
	/* Only tunnels get this far, so other traffic costs no lookup. */
	if (!lookup_addr6(&host_addrs, ip6->daddr)) {
		if (!lookup_addr6(&nat_pods, ip6->daddr))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		to_pod = 1;
		__builtin_memcpy(pod.w, ip6->daddr, sizeof(pod.w));
	}
	outer_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	if ((void *)ip6 + outer_len > data_end)
		return drop_malformed(to_pod);

	strip = off;
	if (gue) {
		family = gue_parse(gue, &glen, &hlen);
		if (!family)
			return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
		strip = off + sizeof(struct udphdr) + glen;
		if (chain_read(&co, ip6, 1, (void *)gue - sizeof(struct udphdr), gue + 1, hlen,
			       data_end))
			hinted = &co;
	}
	return decap_inner(ctx, eth, ip6, 0, strip, outer_len, family, stat, hinted, to_pod,
			   to_pod ? &pod : 0, data_end);
}

static __always_inline int decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return verdict(DECAP_PASS, 0, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return decap4(ctx, eth, data_end);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return decap6(ctx, eth, data_end);
	return verdict(DECAP_PASS, 0, XDP_PASS);
}

#endif
