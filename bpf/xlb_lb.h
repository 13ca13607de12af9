/* The LB fast path as one inline function, so that the benchmark floors in
 * bench_floors.c run exactly the code the real program runs. */
#ifndef XLB_LB_H
#define XLB_LB_H

#include "xlb_maps.h"
#include "xlb_parse.h"
#include "xlb_encap.h"

#define AF_INET 2

/* Load-time parameters (set by internal/dataplane before loading). */
volatile const __be32 node_addr = 0;
volatile const __u32 table_size = XLB_DEFAULT_TABLE_SIZE;

static __always_inline int pass(__u32 reason)
{
	count_reason(reason);
	return XDP_PASS;
}

static __always_inline int drop(__u32 reason)
{
	count_reason(reason);
	return XDP_DROP;
}

/* Everything after the backend is known: next hop, encapsulation, counters,
 * verdict. Called once per encapsulation with mode a constant, so that
 * each copy is compiled without the branches on it. */
static __always_inline int xlb_forward(struct xdp_md *ctx, struct pkt *p, void *data_end,
				       __u32 bid, __be32 be_addr, __u32 hash, const __u8 mode)
{
	struct iphdr *ip = p->ip;
	void *data;

	__u16 inner_len = p->ip_len;
	__u16 overhead = mode == XLB_ENCAP_GUE ? XLB_GUE_OVERHEAD : XLB_IPIP_OVERHEAD;
	__u16 outer_len = inner_len + overhead;
	__u32 gen = nh_gen;
	struct backend_state *bst = bpf_map_lookup_elem(&backend_stats, &bid);
	int no_neigh = 0;

	if (!bst)
		return drop(XLB_DROP_NO_ROUTE);
	struct nh_entry *nh = &bst->nh;
	__u64 now = bpf_jiffies64();

	if (nh->gen != gen || outer_len > nh->max_len ||
	    now - nh->stamp >= XLB_NH_MAX_AGE) {
		struct bpf_fib_lookup fib = {};

		fib.family = AF_INET;
		fib.tos = ip->tos;
		fib.l4_protocol = mode == XLB_ENCAP_GUE ? IPPROTO_UDP : IPPROTO_IPIP;
		fib.tot_len = outer_len;
		fib.ipv4_src = node_addr;
		fib.ipv4_dst = be_addr;
		fib.ifindex = ctx->ingress_ifindex;

		long rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
		if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
			if (!(ip->frag_off & bpf_htons(IP_DF)))
				return drop(XLB_DROP_TOO_BIG);
			if (icmp_frag_needed(ctx, node_addr, fib.mtu_result - overhead))
				return drop(XLB_DROP_ENCAP_FAILED);
			count_reason(XLB_TX_ICMP_TOO_BIG);
			return XDP_TX;
		}
		if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
			no_neigh = 1;
		} else if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
			return drop(XLB_DROP_NO_ROUTE);
		} else {
			__u16 max_len = outer_len;

			if (nh->gen == gen && nh->max_len > max_len &&
			    now - nh->stamp < XLB_NH_MAX_AGE)
				max_len = nh->max_len;
			nh->stamp = now;
			nh->gen = gen;
			nh->ifindex = fib.ifindex;
			nh->max_len = max_len;
			__builtin_memcpy((__u8 *)nh->macs, fib.dmac, ETH_ALEN);
			__builtin_memcpy((__u8 *)nh->macs + ETH_ALEN, fib.smac, ETH_ALEN);
		}
	}

	if (p->options)
		count_reason(XLB_NOTE_IP_OPTIONS);
	if (ip->protocol == IPPROTO_ICMP)
		count_reason(XLB_NOTE_ICMP_TO_BACKEND);
	__u8 tos = ip->tos;
	__be16 df = ip->frag_off & bpf_htons(IP_DF);
	ipv4_decrease_ttl(ip);

	/* Ethernet padding after the datagram would travel inside the
	 * tunnel as trailing garbage: cut it. */
	int pad = (int)(data_end - ((void *)ip + inner_len));
	if (pad > 0 && bpf_xdp_adjust_tail(ctx, -pad))
		return drop(XLB_DROP_ENCAP_FAILED);
	if (encap_ipv4(ctx, mode, node_addr, be_addr, hash, inner_len, tos, df))
		return drop(XLB_DROP_ENCAP_FAILED);

	bst->stats.packets++;
	bst->stats.bytes += inner_len;

	if (no_neigh)
		/* The kernel forwards this packet and resolves the neighbour;
		 * the next packet takes the fast path. */
		return pass(XLB_PASS_NO_NEIGH);

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	__u32 *mac = data;
	if ((void *)(mac + 3) > data_end)
		return drop(XLB_DROP_ENCAP_FAILED);
	mac[0] = nh->macs[0];
	mac[1] = nh->macs[1];
	mac[2] = nh->macs[2];
	if (nh->ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(nh->ifindex, 0);
}

static __always_inline int xlb_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt p = {};

	switch (parse_ipv4(data, data_end, &p)) {
	case PARSE_OK:
		break;
	case PARSE_NOT_IPV4:
		return pass(XLB_PASS_NOT_IPV4);
	case PARSE_NOT_TCP_UDP:
		if (!bpf_map_lookup_elem(&vips, &p.ip->daddr))
			return pass(XLB_PASS_NOT_TCP_UDP);
		/* ICMP errors about replies go to the backend that sent the
		 * reply (path MTU discovery needs it); anything else for a VIP
		 * is dropped: the kernel here has no VIP, and passed up it would
		 * route the packet back to the router, which sends it to a node
		 * again, until the TTL runs out. */
		if (parse_icmp_error(&p, data_end))
			return drop(XLB_DROP_VIP_NO_SERVICE);
		break;
	case PARSE_BAD_ETH:
		return drop(XLB_DROP_MALFORMED_ETH);
	case PARSE_BAD_IP:
		return drop(XLB_DROP_MALFORMED_IP);
	default:
		return drop(XLB_DROP_MALFORMED_L4);
	}

	struct iphdr *ip = p.ip;
	__be32 vip = ip->daddr;

	if (p.fragment) {
		/* Non-first fragments carry no ports, so no instance could hash
		 * them to the backend of their first fragment; first fragments
		 * go too, as the datagram could never be completed. */
		if (bpf_map_lookup_elem(&vips, &vip))
			return drop(XLB_DROP_FRAGMENT);
		return pass(XLB_PASS_NO_SERVICE);
	}

	struct svc_slot *svc = svc_lookup(vip, p.dport, p.proto);
	if (!svc) {
		if (bpf_map_lookup_elem(&vips, &vip))
			return drop(XLB_DROP_VIP_NO_SERVICE);
		return pass(XLB_PASS_NO_SERVICE);
	}
	if (ip->ttl <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);

	__u32 svc_id = svc->id;
	__u8 mode = svc->encap;
	__u32 hash = xlb_flow_hash(p.flow_src, vip, p.sport, p.dport, p.proto);
	/* hash * size / 2^32 spreads the hash over the table like a modulo,
	 * without a division (Lemire's fast range reduction). */
	__u32 slot = ((__u64)hash * table_size) >> 32;

	void *table = bpf_map_lookup_elem(&maglev_tables, &svc_id);
	if (!table)
		return drop(XLB_DROP_NO_BACKEND);
	__u64 *entry = bpf_map_lookup_elem(table, &slot);
	if (!entry)
		return drop(XLB_DROP_NO_BACKEND);
	__u32 bid = (__u32)*entry;
	__be32 be_addr = (__be32)(*entry >> 32);
	if (!be_addr)
		return drop(XLB_DROP_NO_BACKEND);

	if (mode == XLB_ENCAP_GUE)
		return xlb_forward(ctx, &p, data_end, bid, be_addr, hash, XLB_ENCAP_GUE);
	return xlb_forward(ctx, &p, data_end, bid, be_addr, hash, XLB_ENCAP_IPIP);
}

#endif
