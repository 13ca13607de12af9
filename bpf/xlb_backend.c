// SPDX-License-Identifier: GPL-2.0
/* xlb backend program: XDP on a backend host's interface. Strips the IPIP
 * or GUE header that an xlb node added and hands the inner packet, whose
 * destination is a VIP configured on this host, to the stack. Everything
 * else passes untouched. */
#include "xlb_helpers.h"

/* Outer destinations that are this host (written by `xlb backend`). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __be32);
	__type(value, __u8);
} host_addrs SEC(".maps");

/* VIPs configured locally: an inner packet for anything else is dropped,
 * so the host never becomes an open relay for spoofed inner packets. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_MAX_VIPS);
	__type(key, __be32);
	__type(value, __u8);
} decap_vips SEC(".maps");

enum decap_stat {
	DECAP_IPIP = 0,   /* IPIP decapsulated */
	DECAP_GUE,        /* GUE decapsulated */
	DECAP_PASS,       /* not encapsulated to this host: passed untouched */
	DECAP_DROP_INNER, /* encapsulated to us, inner packet malformed or not for a local VIP */
	DECAP_DROP_GUE,   /* GUE we cannot parse (version, control, inner protocol) */
	DECAP_STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DECAP_STAT_MAX);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} decap_stats SEC(".maps");

static __always_inline int verdict(__u32 stat, __u64 bytes, int v)
{
	struct xlb_counter *c = bpf_map_lookup_elem(&decap_stats, &stat);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
	return v;
}

SEC("xdp")
int xlb_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip, *inner;
	__u32 strip, stat;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
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
		struct guehdr *gue = (void *)(udp + 1);

		if ((void *)(gue + 1) > data_end || udp->dest != bpf_htons(XLB_GUE_PORT) ||
		    !bpf_map_lookup_elem(&host_addrs, &ip->daddr))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		switch (gue->hlen_c_ver >> 6) {
		case 0: /* variant 0: control bit clear, IPv4 inside */
			if ((gue->hlen_c_ver & 0x20) || gue->proto != IPPROTO_IPIP)
				return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
			strip = sizeof(*ip) + sizeof(*udp) + sizeof(*gue) + (gue->hlen_c_ver & 0x1f) * 4;
			break;
		case 1: /* variant 1: the IPv4 header follows the UDP header */
			if ((gue->hlen_c_ver >> 4) != 4)
				return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
			strip = sizeof(*ip) + sizeof(*udp);
			break;
		default:
			return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
		}
		stat = DECAP_GUE;
	} else {
		return verdict(DECAP_PASS, 0, XDP_PASS);
	}
	if (!bpf_map_lookup_elem(&host_addrs, &ip->daddr))
		return verdict(DECAP_PASS, 0, XDP_PASS);

	if (strip > 20 + 8 + 4 + 31 * 4)
		return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
	inner = (void *)ip + strip;
	if ((void *)(inner + 1) > data_end || inner->version != 4 || inner->ihl < 5)
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	if (!bpf_map_lookup_elem(&decap_vips, &inner->daddr))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	__u64 inner_len = bpf_ntohs(inner->tot_len);

	/* Move the Ethernet header forward over the outer headers, then
	 * advance the packet start to it. */
	struct ethhdr *neth = (void *)eth + strip;
	if ((void *)(neth + 1) > data_end)
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	__builtin_memmove(neth, eth, sizeof(*eth));
	if (bpf_xdp_adjust_head(ctx, (int)strip))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	return verdict(stat, inner_len, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
