// SPDX-License-Identifier: GPL-2.0
/* The NAT floor, for bench/httpbench: the least any NAT node can do to
 * an HTTP flow of the lab, with no state at all. One client, up to eight
 * backends: a client's TCP segment to VIP:vport goes to the backend its
 * source port picks (a multiplicative hash of it, mod n), from the node's address and the
 * client's own port; a backend's reply to the node comes back from
 * VIP:vport to the client. Nothing is looked up but the one
 * configuration entry, nothing allocated, nothing expires: what it costs
 * is parsing, rewriting and XDP_TX, so a NAT path of the lab cannot get
 * faster than this one, whatever its program does. It only works because
 * the lab has a single client (whose ports are unique among its
 * connections) and is not a load balancer: not product code. */
#include "xlb_helpers.h"

#define NATFLOOR_MAX_BACKENDS 8

struct natfloor_cfg {
	__be32 vip;
	__be32 node;
	__be32 client;
	__be16 vport;
	__be16 bport;
	__u32 n; /* backends in use, 1 to NATFLOOR_MAX_BACKENDS; 0: pass all */
	__be32 backends[NATFLOOR_MAX_BACKENDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct natfloor_cfg);
} natfloor_config SEC(".maps");

/* The TCP header as far as the rewrite touches it. */
struct natfloor_tcp {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u16 flags;
	__be16 window;
	__sum16 check;
	__be16 urg_ptr;
};

/* Rewrite the addresses and one port of a segment, with both checksums
 * patched incrementally (the port is in the TCP checksum only). */
static __always_inline void natfloor_rewrite(struct iphdr *ip, struct natfloor_tcp *th, __be32 saddr,
					     __be32 daddr, __be16 *port, __be16 to)
{
	__u32 d = csum_diff32(ip->saddr, saddr) + csum_diff32(ip->daddr, daddr);

	ip->check = csum_apply(ip->check, d);
	th->check = csum_apply(th->check, d + csum_diff16(*port, to));
	ip->saddr = saddr;
	ip->daddr = daddr;
	*port = to;
}

SEC("xdp")
int natfloor(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct natfloor_tcp *th = (void *)(ip + 1);
	__u32 zero = 0;

	if ((void *)(th + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_TCP || (ip->frag_off & bpf_htons(0x3fff)) || ip->ttl <= 1)
		return XDP_PASS;
	struct natfloor_cfg *c = bpf_map_lookup_elem(&natfloor_config, &zero);

	if (!c || !c->n || c->n > NATFLOOR_MAX_BACKENDS)
		return XDP_PASS;
	if (ip->daddr == c->vip && th->dest == c->vport && ip->saddr == c->client) {
		/* Hashed: the kernel gives connect() even ports only. */
		__u32 i = ((__u32)bpf_ntohs(th->source) * 0x9e3779b1u >> 16) % c->n;

		/* i < n <= 8 already; the verifier does not know a modulo's
		 * bound, and the barrier keeps clang from dropping the mask. */
		asm volatile("" : "+r"(i));
		i &= NATFLOOR_MAX_BACKENDS - 1;

		natfloor_rewrite(ip, th, c->node, c->backends[i], &th->dest, c->bport);
	} else if (ip->daddr == c->node && th->source == c->bport) {
		int known = 0;

#pragma unroll
		for (int i = 0; i < NATFLOOR_MAX_BACKENDS; i++)
			known |= i < c->n && ip->saddr == c->backends[i];
		if (!known)
			return XDP_PASS;
		natfloor_rewrite(ip, th, c->vip, c->client, &th->source, c->vport);
	} else {
		return XDP_PASS;
	}
	ipv4_decrease_ttl(ip);

	/* Back to the router, the node's only neighbour. */
	unsigned char mac[ETH_ALEN];

	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
