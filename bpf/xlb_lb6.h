/* The LB path of IPv6 packets, and of every pair of families where the
 * IPv4 path's IPv4-in-IPv4 does not apply: an IPv4 VIP with an IPv6
 * backend, an IPv6 VIP with a backend of either family. Included by
 * xlb_lb.h, whose helpers it uses; docs/decisions/0008-ipv6-data-plane.md
 * has the choices. */
#ifndef XLB_LB6_H
#define XLB_LB6_H

/* The flow hash of an IPv6 flow (FlowHash in Go, which a golden test
 * holds to this): the client's 128 bits through two rounds of
 * MurmurHash3's finalizer, then the ports, protocol and the VIP folded to
 * 32 bits, through a third. Within a service (VIP, port and protocol
 * fixed) the hash depends on every bit of the client's address and port.
 * One hash whatever flow_hash says: lookup3 is kept for IPv4 clusters
 * that hashed with it before, and no cluster hashed IPv6 before. */
static __always_inline __u32 xlb_flow_hash6(const __be32 *saddr, const __be32 *daddr,
					    __be16 sport, __be16 dport, __u8 proto)
{
	__u64 k = fmix64(((__u64)saddr[0] | ((__u64)saddr[1] << 32)) ^ XLB_HASH_SEED64) ^
		  ((__u64)saddr[2] | ((__u64)saddr[3] << 32));
	__u32 d = daddr[0] ^ daddr[1] ^ daddr[2] ^ daddr[3];

	k = fmix64(k) ^ ((__u32)sport | ((__u32)dport << 16)) ^ ((__u64)d << 32) ^
	    ((__u64)proto << 56);
	return (__u32)fmix64(k);
}

/* Whether a is an IPv4 address (IPv4-mapped). */
static __always_inline int xlb_addr_is4(const union xlb_addr *a)
{
	return !(a->w[0] | a->w[1] | (a->w[2] ^ bpf_htonl(0xffff)));
}

/* nh_refill towards an IPv6 backend, from node_addr6. */
static __noinline long nh_refill6(struct xdp_md *ctx, struct nh_entry *nh,
				  const union xlb_addr *be, __u32 arg)
{
	struct bpf_fib_lookup fib = {};

	fib.family = AF_INET6;
	fib.ipv6_src[0] = node_addr6.w[0];
	fib.ipv6_src[1] = node_addr6.w[1];
	fib.ipv6_src[2] = node_addr6.w[2];
	fib.ipv6_src[3] = node_addr6.w[3];
	__builtin_memcpy(fib.ipv6_dst, be, 16);
	return nh_lookup(ctx, nh, &fib, arg);
}

/* Answer a packet too big for its tunnel (see xlb_forward_x), one
 * function per family, out of line: their stack would not fit the call
 * chain of xlb_lb6. */
static __noinline int too_big6(struct xdp_md *ctx, __u32 mtu, __u16 inner_len)
{
	if (icmp6_too_big(ctx, &node_addr6, mtu, inner_len))
		return drop(XLB_DROP_ENCAP_FAILED);
	count_reason(XLB_TX_ICMP_TOO_BIG);
	return XDP_TX;
}

static __noinline int too_big4(struct xdp_md *ctx, __u32 mtu)
{
	if (icmp_frag_needed(ctx, node_addr, mtu))
		return drop(XLB_DROP_ENCAP_FAILED);
	count_reason(XLB_TX_ICMP_TOO_BIG);
	return XDP_TX;
}

/* xlb_forward for the pairs that involve IPv6: the inner packet (IPv6 if
 * inner6, else IPv4) is the frame's, behind its Ethernet header, of
 * inner_len bytes; be is the backend's address, whose family is the
 * outer header's. What it does is what xlb_forward does: next hop, a
 * "too big" answer (ICMPv6 Packet Too Big for an IPv6 packet, which no
 * router fragments), TTL or hop limit, encapsulation, counters. */
static __always_inline int xlb_forward_x(struct xdp_md *ctx, int inner6, __u16 inner_len,
					 __u32 bid, const union xlb_addr *be, __u32 hash, __u8 mode)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *l3 = data + sizeof(struct ethhdr);
	int outer6 = !xlb_addr_is4(be);
	__u16 overhead = encap_overhead(mode) + (outer6 ? XLB_OUTER6_EXTRA : 0);
	__u16 outer_len = inner_len + overhead;
	__u32 gen = nh_gen;
	struct backend_state *bst = bpf_map_lookup_elem(&backend_stats, &bid);
	int no_neigh = 0;
	__u8 tos;
	__be16 df;

	if (inner6) {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return drop(XLB_DROP_MALFORMED_IP);
		tos = bpf_ntohl(ip6->vtf) >> 20;
		df = bpf_htons(IP_DF); /* no router fragments IPv6 */
	} else {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return drop(XLB_DROP_MALFORMED_IP);
		tos = ip->tos;
		df = ip->frag_off & bpf_htons(IP_DF);
	}
	if (!bst)
		return drop(XLB_DROP_NO_ROUTE);
	struct nh_entry *nh = &bst->nh;
	__u64 now = bpf_jiffies64();

	if (nh->gen != gen || outer_len > nh->max_len || now - nh->stamp >= XLB_NH_MAX_AGE) {
		__u32 arg = outer_len | (encap_is_gue(mode) ? 1u << 24 : 0);
		long rc;

		if (outer6) {
			if (!node_addr6.w[0] && !node_addr6.w[1] && !node_addr6.w[2] && !node_addr6.w[3])
				return drop(XLB_DROP_NO_ROUTE);
			rc = nh_refill6(ctx, nh, be, arg);
		} else {
			rc = nh_refill(ctx, nh, be->w[3], arg | ((__u32)tos << 16));
		}
		if ((rc & 0xff) == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
			__u32 mtu = (rc >> 8) - overhead;

			if (!df)
				return drop(XLB_DROP_TOO_BIG);
			return inner6 ? too_big6(ctx, mtu, inner_len) : too_big4(ctx, mtu);
		}
		if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
			no_neigh = 1;
		else if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return drop(XLB_DROP_NO_ROUTE);
	}

	/* The packets re-read: nh_refill's call may have moved nothing, but
	 * the verifier forgets packet bounds over it. */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	l3 = data + sizeof(struct ethhdr);
	if (inner6) {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return drop(XLB_DROP_MALFORMED_IP);
		if (ip6->nexthdr == IPPROTO_ICMPV6)
			count_reason(XLB_NOTE_ICMP_TO_BACKEND);
		ip6->hop_limit--;
	} else {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return drop(XLB_DROP_MALFORMED_IP);
		if (ip->protocol == IPPROTO_ICMP)
			count_reason(XLB_NOTE_ICMP_TO_BACKEND);
		ipv4_decrease_ttl(ip);
	}

	long avail = data_end - l3;

	/* Keep the compiler from subtracting pointers in 32 bits, which the
	 * verifier refuses. */
	asm volatile("" : "+r"(avail));
	int pad = (int)avail - (int)inner_len;
	if (pad > 0 && bpf_xdp_adjust_tail(ctx, -pad))
		return drop(XLB_DROP_ENCAP_FAILED);
	if (encap_any(ctx, mode, outer6, inner6, node_addr, &node_addr6, be, hash, inner_len, tos,
		      df, no_neigh ? 0 : nh->macs))
		return drop(XLB_DROP_ENCAP_FAILED);

	bst->stats.packets++;
	bst->stats.bytes += inner_len;
	if (no_neigh)
		return pass(XLB_PASS_NO_NEIGH);
	if (nh->ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(nh->ifindex, 0);
}

/* The backend a table entry names: an IPv4 address in the entry, or an
 * IPv6 backend's from the registry (xlb_table_entry_v6). Returns 0, or
 * -1 when the entry names none. */
static __always_inline int entry_backend(xlb_table_entry e, __u32 *bid, union xlb_addr *be)
{
	__be32 a4 = xlb_table_entry_addr(e);

	*bid = xlb_table_entry_bid(e);
	if (a4) {
		*be = XLB_ADDR4(a4);
		return 0;
	}
	if (!xlb_table_entry_v6(e))
		return -1;
	*bid &= ~XLB_TABLE_ENTRY_V6;
	struct backend *b = bpf_map_lookup_elem(&backends, bid);

	if (!b || !(b->addr.w[0] | b->addr.w[1] | b->addr.w[2] | b->addr.w[3]))
		return -1;
	*be = b->addr;
	return 0;
}

/* The entry of service svc_id's table for slot; 0 when there is none. */
static __always_inline xlb_table_entry *table_entry(__u32 svc_id, __u32 slot)
{
	void *table = bpf_map_lookup_elem(&maglev_tables, &svc_id);

	if (!table)
		return 0;
	return bpf_map_lookup_elem(table, &slot);
}

/* The IPv4 path's way out when its table entry has no IPv4 address: an
 * IPv6 backend (IPv4-in-IPv6), or no backend. Out of line, so that the
 * IPv4 path pays nothing for it. */
static __noinline int xlb_lb_to6(struct xdp_md *ctx, __u32 svc_id, __u32 slot, __u32 hash,
				 __u8 mode)
{
	xlb_table_entry *e = table_entry(svc_id, slot);
	struct iphdr *ip = (void *)(long)ctx->data + sizeof(struct ethhdr);
	union xlb_addr be;
	__u32 bid;

	if (!e || entry_backend(*e, &bid, &be))
		return drop(XLB_DROP_NO_BACKEND);
	if ((void *)(ip + 1) > (void *)(long)ctx->data_end)
		return drop(XLB_DROP_MALFORMED_IP);
	__u16 inner_len = bpf_ntohs(ip->tot_len); /* parse_ipv4 checked it */

	if (encap_is_gue(mode))
		return xlb_forward_x(ctx, 0, inner_len, bid, &be, hash, XLB_ENCAP_GUE);
	return xlb_forward_x(ctx, 0, inner_len, bid, &be, hash, XLB_ENCAP_IPIP);
}

/* The LB path of an IPv6 frame, out of line so that the IPv4 path keeps
 * its registers. Mirrors xlb_lb: what is not a service's passes, except
 * what is addressed to a VIP, which the kernel here does not have and
 * would route back to the router. */
static __noinline int xlb_lb6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 p = {};
	const __be32 *vip;

	switch (parse_ipv6(data + sizeof(struct ethhdr), data_end, &p)) {
	case PARSE6_OK:
		break;
	case PARSE6_BAD_IP:
		return drop(XLB_DROP_MALFORMED_IP);
	case PARSE6_BAD_L4:
		return drop(XLB_DROP_MALFORMED_L4);
	case PARSE6_FRAGMENT:
		/* As for IPv4: no instance could hash a later fragment to
		 * the backend of the first. */
		if (!is_vip6(p.ip6->daddr))
			return pass(XLB_PASS_IPV6_EXT);
		return drop(XLB_DROP_FRAGMENT);
	case PARSE6_EXT:
		if (!is_vip6(p.ip6->daddr))
			return pass(XLB_PASS_IPV6_EXT);
		return drop(XLB_DROP_IPV6_EXT);
	default: /* PARSE6_NOT_TCP_UDP */
		if (p.nexthdr == IPPROTO_ICMPV6) {
			int type = icmp6_type(&p, data_end);

			/* Neighbour discovery, whoever it is for. */
			if (type >= ICMPV6_ND_FIRST && type <= ICMPV6_ND_LAST)
				return pass(XLB_PASS_NOT_TCP_UDP);
		}
		if (!is_vip6(p.ip6->daddr))
			return pass(XLB_PASS_NOT_TCP_UDP);
		/* ICMPv6 errors about replies go to the backend that sent the
		 * reply; anything else for a VIP is dropped (xlb_lb says why). */
		if (parse_icmp6_error(&p, data_end))
			return drop(XLB_DROP_VIP_NO_SERVICE);
		break;
	}

	struct ipv6hdr *ip6 = p.ip6;

	vip = ip6->daddr;
	struct svc_slot *svc = svc_lookup6(vip, p.dport, p.proto);
	if (!svc) {
		if (!is_vip6(vip))
			return pass(XLB_PASS_NO_SERVICE);
		return drop(XLB_DROP_VIP_NO_SERVICE);
	}
	if (ip6->hop_limit <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);

	__u8 mode = svc->encap;
	__u8 flags = svc->flags;
	__be16 hsport = hashed_sport(p.sport, flags);
	__u32 hash = xlb_flow_hash6(p.flow_src, vip, hsport, p.dport, p.proto);

	/* The control plane gives IPv6 services none of these yet. */
	if ((flags & (XLB_SVC_STATEFUL | XLB_SVC_SOURCE_RANGES)) || mode > XLB_ENCAP_GUE)
		return drop(XLB_DROP_NO_BACKEND);

	xlb_table_entry *e = table_entry(svc->id, flow_slot(hash));
	union xlb_addr be;
	__u32 bid;

	if (!e || entry_backend(*e, &bid, &be))
		return drop(XLB_DROP_NO_BACKEND);
	/* One copy for both modes: two would not fit the stack of a call
	 * chain that begins in xlb_lb. */
	return xlb_forward_x(ctx, 1, p.ip_len, bid, &be, tunnel_hash(hash, p.sport, hsport), mode);
}

#endif
