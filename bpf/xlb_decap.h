/* Decapsulation on a backend host: IPIP and GUE from an xlb node, to a
 * local VIP or (Kubernetes mode) a local pod. */
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

/* Frames that are not a tunnel to this host or a local pod reach the
 * stack exactly as they would without xlb, malformed ones included: the
 * stack checks IPv4 headers itself (and counts what it rejects). A tunnel
 * to us is ours to check: the outer length must fit the frame and the
 * inner packet the outer datagram, or it is dropped. */
static __always_inline int decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip, *inner;
	struct guehdr *gue = 0;
	struct xlb_gue_hint *hint = 0;
	__u32 strip, stat, outer_len, inner_len;
	int to_pod = 0;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return verdict(DECAP_PASS, 0, XDP_PASS);
	ip = (void *)(eth + 1);
	/* xlb's outer header is 20 bytes, version 4, no options. */
	if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->version != 4)
		return verdict(DECAP_PASS, 0, XDP_PASS);
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		/* The stack reassembles; our encapsulation never fragments. */
		return verdict(DECAP_PASS, 0, XDP_PASS);

	if (ip->protocol == IPPROTO_IPIP) {
		strip = sizeof(*ip);
		stat = DECAP_IPIP;
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *udp = (void *)(ip + 1);

		gue = (void *)(udp + 1);
		if ((void *)(gue + 1) > data_end || udp->dest != bpf_htons(XLB_GUE_PORT))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		strip = 0; /* set below, once the destination is known to be local */
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
		switch (gue->hlen_c_ver >> 6) {
		case 0: /* variant 0: control bit clear, IPv4 inside */
			if ((gue->hlen_c_ver & 0x20) || gue->proto != IPPROTO_IPIP)
				return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
			strip = sizeof(*ip) + sizeof(struct udphdr) + sizeof(*gue) +
				(gue->hlen_c_ver & 0x1f) * 4;
			/* Other private data carries no hint and is skipped. */
			if ((gue->hlen_c_ver & 0x1f) == XLB_GUE_HINT_WORDS)
				hint = (void *)(gue + 1);
			break;
		case 1: /* variant 1: the IPv4 header follows the UDP header */
			if ((gue->hlen_c_ver >> 4) != 4)
				return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
			strip = sizeof(*ip) + sizeof(struct udphdr);
			break;
		default:
			return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
		}
	}

	if (strip > 20 + 8 + 4 + 31 * 4)
		return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
	/* The inner packet must lie within the outer datagram, which lies
	 * within the frame: nothing after it travels on. */
	inner = (void *)ip + strip;
	if ((void *)(inner + 1) > data_end || inner->version != 4 || inner->ihl < 5)
		return drop_malformed(to_pod);
	inner_len = bpf_ntohs(inner->tot_len);
	if (inner_len < inner->ihl * 4 || strip + inner_len > outer_len)
		return drop_malformed(to_pod);

	if (to_pod) {
		__be32 pod = ip->daddr;
		int r;

		if (hint && inner->protocol == IPPROTO_TCP) {
			int v = chain_decide_pod(ctx, eth, ip, hint, inner, inner_len, data_end, &pod);

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

	if (!lookup_addr4(&decap_vips, inner->daddr))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	if (hint && inner->protocol == IPPROTO_TCP) {
		int v = chain_decide(ctx, eth, ip, hint, inner, inner_len, data_end);

		if (v != CHAIN_DELIVER)
			return v;
	}
	if (strip_outer(ctx, eth, strip, data_end))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	return verdict(stat, inner_len, XDP_PASS);
}

#endif
