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

/* Per-CPU room for what the IPv6 path would otherwise keep on its stack,
 * which the call chain of xlb_lb6 has no more of: a stateful service's
 * flow key and entry, and an orphan's uncached next hop. Not shared with
 * Go. */
struct lb6_scratch {
	struct ct_key key;
	struct ct_entry val;
	__u32 pad;
	struct nh_entry nh;
	struct bpf_fib_lookup fib;
	struct xlb_gue_hint hint; /* a daisy-chained service's, to an IPv4 backend */
	struct xlb_gue_hint6 hint6; /* the same to an IPv6 backend */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb6_scratch);
} lb6_scratch SEC(".maps");

static __always_inline struct lb6_scratch *scratch6(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&lb6_scratch, &zero);
}

/* nh_refill for xlb_forward_x: towards a backend of either family (be),
 * from node_addr or node_addr6. The lookup's argument is in the
 * scratch, not on the stack: xlb_lb6's call chain has no room for it. */
static __noinline long nh_refill_x(struct xdp_md *ctx, struct nh_entry *nh,
				   const union xlb_addr *be, __u32 arg)
{
	struct lb6_scratch *sc = scratch6();

	if (!sc)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	struct bpf_fib_lookup *fib = &sc->fib;

	__builtin_memset(fib, 0, sizeof(*fib));
	if (xlb_addr_is4(be)) {
		fib->family = AF_INET;
		fib->ipv4_src = node_addr;
		fib->ipv4_dst = be->w[3];
	} else {
		/* No IPv6 address, no IPv6 backend (the control plane refuses
		 * them): no route. */
		if (!(node_addr6.w[0] | node_addr6.w[1] | node_addr6.w[2] | node_addr6.w[3]))
			return BPF_FIB_LKUP_RET_NOT_FWDED;
		fib->family = AF_INET6;
		fib->ipv6_src[0] = node_addr6.w[0];
		fib->ipv6_src[1] = node_addr6.w[1];
		fib->ipv6_src[2] = node_addr6.w[2];
		fib->ipv6_src[3] = node_addr6.w[3];
		__builtin_memcpy(fib->ipv6_dst, be, 16);
	}
	return nh_lookup(ctx, nh, fib, arg);
}

/* xlb_lb6's answer "too big for the tunnel, an ICMPv6 Packet Too Big
 * with this MTU is due", which xlb_lb6's caller sends (xlb_lb6_reply):
 * sent from within xlb_lb6, its stack would not fit the call chain. An
 * XDP verdict is below 256. */
#define XLB_TOO_BIG_DEFERRED(mtu) ((int)(((mtu) & 0xffff) << 8) | 0xff)

/* Answer a packet too big for its tunnel (see xlb_forward_x), one
 * function per family, out of line: their stack would not fit the call
 * chain of xlb_lb6. */
static __noinline int too_big6(struct xdp_md *ctx, __u32 mtu, __u16 inner_len)
{
	/* Without an IPv6 address the node has no source to answer from. */
	if (!(node_addr6.w[0] | node_addr6.w[1] | node_addr6.w[2] | node_addr6.w[3]))
		return drop(XLB_DROP_TOO_BIG);
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
					 __u32 bid, const union xlb_addr *be, __u32 hash, __u8 mode,
					 int orphan, const int defer_too_big)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *l3 = data + sizeof(struct ethhdr);
	int outer6 = !xlb_addr_is4(be);
	__u16 overhead = encap_overhead_x(mode, outer6);
	__u16 outer_len = inner_len + overhead;
	__u32 gen = nh_gen;
	struct backend_state *bst = orphan ? 0 : bpf_map_lookup_elem(&backend_stats, &bid);
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
	struct nh_entry *nh;

	if (bst) {
		nh = &bst->nh;
	} else {
		/* An orphan (xlb_forward says what it is) goes through the FIB
		 * every time: generation 0 never matches. */
		struct lb6_scratch *sc = orphan ? scratch6() : 0;

		if (!sc)
			return drop(XLB_DROP_NO_ROUTE);
		nh = &sc->nh;
		nh->gen = 0;
	}
	__u64 now = bpf_jiffies64();

	if (nh->gen != gen || outer_len > nh->max_len || now - nh->stamp >= XLB_NH_MAX_AGE) {
		__u32 arg = outer_len | (encap_is_gue(mode) ? 1u << 24 : 0) |
			    (outer6 ? 0 : (__u32)tos << 16);
		long rc = nh_refill_x(ctx, nh, be, arg);
		if ((rc & 0xff) == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
			__u32 mtu = (rc >> 8) - overhead;

			if (!df)
				return drop(XLB_DROP_TOO_BIG);
			if (defer_too_big)
				return XLB_TOO_BIG_DEFERRED(mtu);
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
	/* A daisy-chained service's hint is in the scratch, in the outer
	 * header's family (chain_hint_x). */
	struct lb6_scratch *hsc = mode == XLB_ENCAP_GUE_HINT ? scratch6() : 0;
	const void *hint = hsc ? (outer6 ? (void *)&hsc->hint6 : (void *)&hsc->hint) : 0;

	if (encap_any(ctx, mode, outer6, inner6, node_addr, &node_addr6, be, hash, inner_len, tos,
		      df, no_neigh ? 0 : nh->macs, hint))
		return drop(XLB_DROP_ENCAP_FAILED);

	if (bst) {
		bst->stats.packets++;
		bst->stats.bytes += inner_len;
	}
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

/* A daisy-chained service's slot of its chain table (chain_tables):
 * its backend into the scratch's val, and its hint, with the generation
 * after the last slot (chain is the table, e the slot's entry or 0), in
 * the backend's family. An IPv4 backend's entry has its address; an IPv6
 * backend's has none and XLB_TABLE_ENTRY_V6 in its id, as in
 * maglev_tables, and its address is in the registry (backends): the
 * IPv4 path then takes its "no address" branch only. Its hint has
 * 16-byte owners (hint6, which travels over IPv6). The control plane
 * names owners of the slot's backend's family only (lb.chainEntries).
 * Returns 0, or -1 when the slot names no backend. */
static __always_inline int chain_hint_x(struct lb6_scratch *sc, void *chain, struct chain_entry *e)
{
	__u32 last = table_size;
	__be32 gen;

	if (!e)
		return -1;
	sc->val.bid = e->bid;
	if (xlb_addr_v4(&e->addr)) {
		sc->val.addr = e->addr;
		sc->hint.prev = e->prev.w[3];
		sc->hint.prev2 = e->prev2.w[3];
		sc->hint.changed = bpf_htonl(e->changed);
		e = bpf_map_lookup_elem(chain, &last);
		gen = e ? bpf_htonl(e->changed) : 0;
		sc->hint.generation = gen;
		return 0;
	}
	if (!(e->bid & XLB_TABLE_ENTRY_V6))
		return -1;
	sc->val.bid = e->bid & ~XLB_TABLE_ENTRY_V6;
	struct backend *b = bpf_map_lookup_elem(&backends, &sc->val.bid);

	if (!b || !(b->addr.w[0] | b->addr.w[1] | b->addr.w[2] | b->addr.w[3]))
		return -1;
	sc->val.addr = b->addr;
	sc->hint6.prev = e->prev;
	sc->hint6.prev2 = e->prev2;
	sc->hint6.changed = bpf_htonl(e->changed);
	e = bpf_map_lookup_elem(chain, &last);
	gen = e ? bpf_htonl(e->changed) : 0;
	sc->hint6.generation = gen;
	return 0;
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
		return xlb_forward_x(ctx, 0, inner_len, bid, &be, hash, XLB_ENCAP_GUE, 0, 0);
	return xlb_forward_x(ctx, 0, inner_len, bid, &be, hash, XLB_ENCAP_IPIP, 0, 0);
}

/* xlb_lb_chained's way out when its slot's entry e (of chain table
 * chain) names no IPv4 backend: IPv4 in GUE over IPv6 with the IPv6 hint
 * (hash is the tunnel hash). Out of line, as xlb_lb_to6, and given what
 * xlb_lb_chained holds anyway, so that the IPv4 path pays nothing for
 * it. */
static __noinline int xlb_lb_chained_to6(struct xdp_md *ctx, void *chain,
					 struct chain_entry *e, __u32 hash)
{
	struct lb6_scratch *sc = scratch6();
	struct iphdr *ip = (void *)(long)ctx->data + sizeof(struct ethhdr);

	if (!sc || chain_hint_x(sc, chain, e))
		return drop(XLB_DROP_NO_BACKEND);
	if ((void *)(ip + 1) > (void *)(long)ctx->data_end)
		return drop(XLB_DROP_MALFORMED_IP);
	return xlb_forward_x(ctx, 0, bpf_ntohs(ip->tot_len), sc->val.bid, &sc->val.addr, hash,
			     XLB_ENCAP_GUE_HINT, 0, 0);
}

/* ct_pick's way out for a stateful IPv4 flow whose backend is IPv6
 * (IPv4-in-IPv6): the entry that names it (CT_TO6_ENTRY), or the table's
 * slot (CT_TO6_TABLE), which the flow's next packets then find in its
 * entry. ct_pick has counted what it saw; the flow key and entry live in
 * the scratch, as for an IPv6 flow. Out of line, so that the IPv4
 * stateful path pays nothing for it; xlb_lb.h says what the arguments
 * hold. */
static __noinline int xlb_lb_stateful_to6(struct xdp_md *ctx, __u32 svc, __u32 ports,
					  __be32 flow_src, __u32 hash)
{
	__u32 svc_id = svc & 0x3fff;
	int from_table = ((svc >> 14) & 3) == CT_TO6_TABLE;
	__u8 mode = (svc >> 16) & 0xf;
	__u8 proto = svc >> 24;
	__be16 sport = ports & 0xffff;
	/* tunnel_hash: the source port the hash left out, mixed back in. */
	__u32 th = (svc & CT_TO6_AFFINITY) ? hash ^ sport : hash;
	struct lb6_scratch *sc = scratch6();
	struct iphdr *ip = (void *)(long)ctx->data + sizeof(struct ethhdr);
	int orphan = 0;

	if (!sc)
		return drop(XLB_DROP_NO_BACKEND);
	if ((void *)(ip + 1) > (void *)(long)ctx->data_end)
		return drop(XLB_DROP_MALFORMED_IP);
	__u16 inner_len = bpf_ntohs(ip->tot_len); /* parse_ipv4 checked it */
	int own = ip->protocol == proto; /* not an ICMP error */

	sc->key.saddr = XLB_ADDR4(flow_src);
	sc->key.daddr = XLB_ADDR4(ip->daddr);
	sc->key.sport = sport;
	sc->key.dport = ports >> 16;
	sc->key.proto = proto;
	sc->key.pad[0] = sc->key.pad[1] = sc->key.pad[2] = 0;
	if (from_table) {
		xlb_table_entry *e = table_entry(svc_id, flow_slot(hash));

		if (!e || entry_backend(*e, &sc->val.bid, &sc->val.addr))
			return drop(XLB_DROP_NO_BACKEND);
		if (own && !bpf_map_update_elem(&conntrack, &sc->key, &sc->val, BPF_ANY))
			count_reason(XLB_NOTE_CT_NEW);
	} else {
		struct ct_entry *ct = bpf_map_lookup_elem(&conntrack, &sc->key);

		if (!ct)
			return drop(XLB_DROP_NO_BACKEND);
		sc->val = *ct;
		orphan = !ct_valid(&sc->val, svc_id);
	}
	if (encap_is_gue(mode))
		return xlb_forward_x(ctx, 0, inner_len, sc->val.bid, &sc->val.addr, th, XLB_ENCAP_GUE,
				     orphan, 0);
	return xlb_forward_x(ctx, 0, inner_len, sc->val.bid, &sc->val.addr, th, XLB_ENCAP_IPIP,
			     orphan, 0);
}

/* A stateful service's backend for an IPv6 flow. */
struct pick6 {
	union xlb_addr be;
	__u32 bid;
};

/* ct_pick for IPv6, out of line (its stack would not fit xlb_lb6's call
 * chain), with its key and entry in the per-CPU scratch. Hashes the
 * flow itself (hsport: hashed_sport). Leaves the backend in the
 * scratch's val and returns 0, 1 for an orphan (ct_valid), or -1 when
 * the flow has neither an entry nor a backend in the table. */
static __noinline int ct6_pick(struct xdp_md *ctx, struct pkt6 *p, __u32 svc_id, __be16 hsport)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct lb6_scratch *sc = scratch6();
	struct ipv6hdr *ip6 = p->ip6;

	if (!sc)
		return -1;
	__builtin_memcpy(&sc->key.saddr, p->flow_src, 16);
	__builtin_memcpy(&sc->key.daddr, ip6->daddr, 16);
	sc->key.sport = p->sport;
	sc->key.dport = p->dport;
	sc->key.proto = p->proto;
	sc->key.pad[0] = sc->key.pad[1] = sc->key.pad[2] = 0;

	int own = p->nexthdr != IPPROTO_ICMPV6; /* not an ICMPv6 error */
	int tcp = own && p->proto == IPPROTO_TCP;
	int syn = 0;

	if (tcp) {
		__u8 *th = (void *)ip6 + p->l4_off;

		if ((void *)(th + 14) <= data_end)
			syn = (th[13] & (XLB_TCP_SYN | XLB_TCP_ACK)) == XLB_TCP_SYN;
	}
	struct ct_entry *ct = bpf_map_lookup_elem(&conntrack, &sc->key);

	if (ct && (ct->addr.w[0] | ct->addr.w[1] | ct->addr.w[2] | ct->addr.w[3])) {
		int gone = !ct_valid(ct, svc_id);

		if (!(gone && syn)) {
			sc->val = *ct;
			return gone;
		}
	} else if (tcp && !syn) {
		count_reason(XLB_NOTE_CT_MIDFLOW_MISS);
	}
	__u32 hash = xlb_flow_hash6(p->flow_src, ip6->daddr, hsport, p->dport, p->proto);
	xlb_table_entry *e = table_entry(svc_id, flow_slot(hash));

	if (!e || entry_backend(*e, &sc->val.bid, &sc->val.addr))
		return -1;
	if (own && !bpf_map_update_elem(&conntrack, &sc->key, &sc->val, BPF_ANY))
		count_reason(XLB_NOTE_CT_NEW);
	return 0;
}

/* xlb_lb6's answer "a daisy-chained service's packet, which passed its
 * checks", for its caller to forward (xlb_lb6_chained): the service's ID
 * and flags, beside XLB_TOO_BIG_DEFERRED. Bit 22 is always set, so that
 * the answer for service 0 without flags is no XDP verdict (below 256). */
#define XLB_LB6_CHAINED(id, flags) ((int)(((id) & 0x3fff) << 8 | 1u << 22 | (__u32)(flags) << 24) | 0xfd)

/* The rest of xlb_lb6 for a daisy-chained IPv6 service (svc: what
 * XLB_LB6_CHAINED packed), called from xlb_lb6's caller so that its
 * frame is not on top of xlb_lb6's: the flow again from the packet (or
 * the ICMPv6 error's quote), its slot's backend and hint from the
 * service's chain table, as xlb_lb_chained reads them for an IPv4 VIP,
 * and the packet in GUE over the backend's family with the hint of that
 * family (chain_hint_x). Returns a verdict, or XLB_TOO_BIG_DEFERRED. */
static __noinline int xlb_lb6_chained(struct xdp_md *ctx, __u32 svc)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct lb6_scratch *sc = scratch6();
	__u32 svc_id = (svc >> 8) & 0x3fff;
	struct pkt6 p = {};

	switch (parse_ipv6(data + sizeof(struct ethhdr), data_end, &p)) {
	case PARSE6_OK:
		break;
	case PARSE6_NOT_TCP_UDP:
		if (!parse_icmp6_error(&p, data_end))
			break;
		/* fall through: xlb_lb6 let it by, so it cannot be */
	default:
		return drop(XLB_DROP_MALFORMED_IP);
	}
	void *chain = bpf_map_lookup_elem(&chain_tables, &svc_id);
	__be16 hsport = hashed_sport(p.sport, svc >> 24);
	__u32 hash = xlb_flow_hash6(p.flow_src, p.ip6->daddr, hsport, p.dport, p.proto);
	__u32 slot = flow_slot(hash);

	if (!sc || !chain || chain_hint_x(sc, chain, bpf_map_lookup_elem(chain, &slot)))
		return drop(XLB_DROP_NO_BACKEND);
	return xlb_forward_x(ctx, 1, p.ip_len, sc->val.bid, &sc->val.addr,
			     tunnel_hash(hash, p.sport, hsport), XLB_ENCAP_GUE_HINT, 0, 1);
}

/* NAT and DNAT services on IPv6 VIPs. */
#include "xlb_lbnat6.h"

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
		if (deny_v6(p.ip6->saddr))
			return drop(XLB_DROP_DENIED);
		return XLB_LB6_NAT_FRAGMENT; /* counted if a NAT service's, dropped */
	case PARSE6_EXT:
		if (!is_vip6(p.ip6->daddr))
			return pass(XLB_PASS_IPV6_EXT);
		if (deny_v6(p.ip6->saddr))
			return drop(XLB_DROP_DENIED);
		return drop(XLB_DROP_IPV6_EXT);
	default: /* PARSE6_NOT_TCP_UDP */
		if (p.nexthdr == IPPROTO_ICMPV6) {
			int type = icmp6_type(&p, data_end);

			/* Neighbour discovery, whoever it is for. */
			if (type >= ICMPV6_ND_FIRST && type <= ICMPV6_ND_LAST)
				return pass(XLB_PASS_NOT_TCP_UDP);
		}
		if (!is_vip6(p.ip6->daddr)) {
			/* An ICMPv6 error about a NAT session's packet to its
			 * backend goes back to the session's client. */
			if (p.nexthdr == IPPROTO_ICMPV6 && lbnat6_on(p.ip6->daddr))
				return XLB_LB6_NAT_REPLY_ICMP;
			return pass(XLB_PASS_NOT_TCP_UDP);
		}
		if (deny_v6(p.ip6->saddr))
			return drop(XLB_DROP_DENIED);
		/* Pruned by the verifier when off. */
		if (ping_vips) {
			enum ping_result r = vip_ping6(ctx, &p);

			if (r == PING_REPLY) {
				count_reason(XLB_TX_PING_REPLY);
				return XDP_TX;
			}
			if (r == PING_REFUSED)
				return drop(XLB_DROP_PING_REFUSED);
		}
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
			/* A NAT session's reply comes back to the node. */
			return lbnat6_on(vip) ? XLB_LB6_NAT_REPLY : pass(XLB_PASS_NO_SERVICE);
		if (deny_v6(ip6->saddr))
			return drop(XLB_DROP_DENIED);
		return drop(XLB_DROP_VIP_NO_SERVICE);
	}
	/* Who may reach the service, as on the IPv4 path: the node's deny
	 * list first, then the service's source ranges (an ICMPv6 error
	 * passes them by the client of the flow it quotes). */
	if (deny_v6(ip6->saddr))
		return drop(XLB_DROP_DENIED);
	if ((svc->flags & XLB_SVC_SOURCE_RANGES) && !source_allowed6(svc->id, p.flow_src)) {
		count_source_drop(svc->id, p.ip_len);
		return drop(XLB_DROP_SOURCE_RANGE);
	}
	if (ip6->hop_limit <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);

	__u8 mode = svc->encap;
	__u8 flags = svc->flags;
	__be16 hsport = hashed_sport(p.sport, flags);
	struct pick6 pick;
	int orphan = 0;

	/* NAT and daisy-chained services go on in xlb_lb6's caller
	 * (xlb_lbnat6.h, xlb_lb6_chained), out of this frame. */
	if (mode > XLB_ENCAP_GUE) {
		if (mode == XLB_ENCAP_NAT || mode == XLB_ENCAP_DNAT)
			return p.nexthdr == IPPROTO_ICMPV6 ? XLB_LB6_NAT_ICMP : XLB_LB6_NAT;
		if (mode == XLB_ENCAP_GUE_HINT)
			return XLB_LB6_CHAINED(svc->id, flags);
		return drop(XLB_DROP_NO_BACKEND);
	}
	/* The stateful path before the hash, so that fewer values live
	 * across its call (the stack, again). */
	if (flags & XLB_SVC_STATEFUL) {
		orphan = ct6_pick(ctx, &p, svc->id, hsport);
		struct lb6_scratch *sc = scratch6();

		if (orphan < 0 || !sc)
			return drop(XLB_DROP_NO_BACKEND);
		pick.bid = sc->val.bid;
		pick.be = sc->val.addr;
	}
	__u32 hash = xlb_flow_hash6(p.flow_src, vip, hsport, p.dport, p.proto);

	if (!(flags & XLB_SVC_STATEFUL)) {
		xlb_table_entry *e = table_entry(svc->id, flow_slot(hash));

		if (!e || entry_backend(*e, &pick.bid, &pick.be))
			return drop(XLB_DROP_NO_BACKEND);
	}
	/* One copy for every mode: one per mode would not fit the stack of
	 * a call chain that begins in xlb_lb. */
	return xlb_forward_x(ctx, 1, p.ip_len, pick.bid, &pick.be,
			     tunnel_hash(hash, p.sport, hsport), mode, orphan, 1);
}

/* xlb_lb6, and what it leaves to its caller: the NAT path, a
 * daisy-chained service's packet, a Packet Too Big. */
static __always_inline int xlb_lb6_reply(struct xdp_md *ctx)
{
	int v = xlb_lb6(ctx);

	if (v < 256)
		return v;
	if ((v & 0xff) == 0xfd) {
		v = xlb_lb6_chained(ctx, v);
		if (v < 256)
			return v;
	}
	if ((v & 0xff) == 0xfe)
		return xlb_lb6_nat_dispatch(ctx, v);
	void *data = (void *)(long)ctx->data;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);

	if ((void *)(ip6 + 1) > (void *)(long)ctx->data_end)
		return drop(XLB_DROP_MALFORMED_IP);
	return too_big6(ctx, (__u32)v >> 8, sizeof(*ip6) + bpf_ntohs(ip6->payload_len));
}

#endif
