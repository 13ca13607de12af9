/* The LB fast path as one inline function, so that the benchmark floors in
 * bench_floors.c run exactly the code the real program runs. */
#ifndef XLB_LB_H
#define XLB_LB_H

#include "xlb_maps.h"
#include "xlb_svc.h"
#include "xlb_parse.h"
#include "xlb_encap.h"
#include "xlb_ping.h"
#include "xlb_policy.h"

#define AF_INET 2
#define AF_INET6 10

#define XLB_TCP_SYN 0x02
#define XLB_TCP_ACK 0x10

/* Load-time parameters (set by internal/dataplane/lb before loading).
 * node_addr6 is the outer source towards IPv6 backends. */
volatile const __be32 node_addr = 0;
volatile const union xlb_addr node_addr6 = {};
volatile const __u32 table_size = XLB_DEFAULT_TABLE_SIZE;
/* enum xlb_flow_hash. The verifier knows a frozen constant's value and
 * removes the branch it decides, so the choice costs a packet nothing. */
volatile const __u32 flow_hash = XLB_FLOW_HASH_FMIX64;
/* Answer ICMP echo requests to a VIP (xlb_ping.h); 0: drop them. */
volatile const __u32 ping_vips = 0;

/* The flow hash every xlb instance of a cluster computes alike. */
static __always_inline __u32 xlb_flow_hash(__be32 saddr, __be32 daddr, __be16 sport,
					    __be16 dport, __u8 proto)
{
	if (flow_hash == XLB_FLOW_HASH_LOOKUP3)
		return xlb_flow_hash_lookup3(saddr, daddr, sport, dport, proto);
	return xlb_flow_hash_fmix64(saddr, daddr, sport, dport, proto);
}

static __always_inline void count_reason(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&reasons, &reason);

	if (n)
		*n += 1;
}

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

/* Layer-2 mode's answers count their reasons with the above. */
#include "xlb_arp.h"

/* Fill nh with the next hop that fib (its family and addresses set)
 * leads to. arg: the outer packet's length (low 16 bits), its TOS (next
 * 8) and 1 << 24 for GUE. Returns the FIB's verdict, with the MTU above
 * the low 8 bits when the packet needs fragmenting. What the FIB answers
 * is the same for both families, and so is the cache. */
static __always_inline long nh_lookup(struct xdp_md *ctx, struct nh_entry *nh,
				      struct bpf_fib_lookup *f, __u32 arg)
{
	__u16 outer_len = arg & 0xffff;
	__u32 gen = nh_gen;
	__u64 now = bpf_jiffies64();

	f->tos = (arg >> 16) & 0xff;
	f->l4_protocol = (arg >> 24) ? IPPROTO_UDP : IPPROTO_IPIP;
	f->tot_len = outer_len;
	f->ifindex = ctx->ingress_ifindex;

	long rc = bpf_fib_lookup(ctx, f, sizeof(*f), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return rc | ((long)f->mtu_result << 8);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	__u16 max_len = outer_len;

	if (nh->gen == gen && nh->max_len > max_len && now - nh->stamp < XLB_NH_MAX_AGE)
		max_len = nh->max_len;
	nh->stamp = now;
	nh->gen = gen;
	nh->ifindex = f->ifindex;
	nh->max_len = max_len;
	__builtin_memcpy((__u8 *)nh->macs, f->dmac, ETH_ALEN);
	__builtin_memcpy((__u8 *)nh->macs + ETH_ALEN, f->smac, ETH_ALEN);
	return 0;
}

/* nh_lookup towards IPv4 backend be_addr, from node_addr. Out of line on
 * purpose: inlined, the lookup's 64-byte argument and the call kept
 * registers busy on the cached path too
 * (docs/decisions/0001-lb-fast-path.md). An IPv6 backend's twin sets
 * AF_INET6, node_addr6 and its address, and calls nh_lookup alike. */
static __noinline long nh_refill(struct xdp_md *ctx, struct nh_entry *nh, __be32 be_addr,
				 __u32 arg)
{
	struct bpf_fib_lookup fib = {};

	fib.family = AF_INET;
	fib.ipv4_src = node_addr;
	fib.ipv4_dst = be_addr;
	return nh_lookup(ctx, nh, &fib, arg);
}

/* Everything after the backend is known: next hop, encapsulation, counters,
 * verdict. Called once per encapsulation with mode a constant, so that
 * each copy is compiled without the branches on it. hint is read in mode
 * XLB_ENCAP_GUE_HINT only. An orphan is a stateful flow whose backend has
 * left the configuration (its id may already be another backend's): it
 * goes to be_addr through the FIB, past the id's next-hop cache and
 * counters. The stateless path passes the constant 0. */
static __always_inline int xlb_forward(struct xdp_md *ctx, struct pkt *p, void *data_end,
				       __u32 bid, __be32 be_addr, __u32 hash, const __u8 mode,
				       const struct xlb_gue_hint *hint, int orphan)
{
	struct iphdr *ip = p->ip;

	__u16 inner_len = p->ip_len;
	__u16 overhead = encap_overhead(mode);
	__u16 outer_len = inner_len + overhead;
	__u32 gen = nh_gen;
	struct backend_state *bst = orphan ? 0 : bpf_map_lookup_elem(&backend_stats, &bid);
	struct nh_entry uncached = {}; /* generation 0 never matches: a FIB lookup */
	int no_neigh = 0;

	if (!bst && !orphan)
		return drop(XLB_DROP_NO_ROUTE);
	struct nh_entry *nh = bst ? &bst->nh : &uncached;
	__u64 now = bpf_jiffies64();

	if (nh->gen != gen || outer_len > nh->max_len ||
	    now - nh->stamp >= XLB_NH_MAX_AGE) {
		__u32 arg = outer_len | ((__u32)ip->tos << 16) | (encap_is_gue(mode) ? 1u << 24 : 0);
		long rc = nh_refill(ctx, nh, be_addr, arg);

		if ((rc & 0xff) == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
			if (!(ip->frag_off & bpf_htons(IP_DF)))
				return drop(XLB_DROP_TOO_BIG);
			if (icmp_frag_needed(ctx, node_addr, (rc >> 8) - overhead))
				return drop(XLB_DROP_ENCAP_FAILED);
			count_reason(XLB_TX_ICMP_TOO_BIG);
			return XDP_TX;
		}
		if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
			no_neigh = 1;
		else if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return drop(XLB_DROP_NO_ROUTE);
	}

	/* One test for both notes: neither is common. */
	if (__builtin_expect(p->options | (ip->protocol == IPPROTO_ICMP), 0)) {
		if (p->options)
			count_reason(XLB_NOTE_IP_OPTIONS);
		if (ip->protocol == IPPROTO_ICMP)
			count_reason(XLB_NOTE_ICMP_TO_BACKEND);
	}
	__u8 tos = ip->tos;
	__be16 df = ip->frag_off & bpf_htons(IP_DF);
	ipv4_decrease_ttl(ip);

	/* Ethernet padding after the datagram would travel inside the
	 * tunnel as trailing garbage: cut it. */
	long avail = data_end - (void *)ip;

	/* Keep the compiler from subtracting the pointers in 32 bits, which
	 * the verifier refuses (it did so in the stateful path's copy). */
	asm volatile("" : "+r"(avail));
	int pad = (int)avail - (int)inner_len;
	if (pad > 0 && bpf_xdp_adjust_tail(ctx, -pad))
		return drop(XLB_DROP_ENCAP_FAILED);
	if (encap_ipv4(ctx, mode, node_addr, be_addr, hash, inner_len, tos, df, hint,
		       no_neigh ? 0 : nh->macs))
		return drop(XLB_DROP_ENCAP_FAILED);

	if (bst) {
		bst->stats.packets++;
		bst->stats.bytes += inner_len;
	}

	if (no_neigh)
		/* The kernel forwards this packet and resolves the neighbour;
		 * the next packet takes the fast path. */
		return pass(XLB_PASS_NO_NEIGH);
	if (nh->ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(nh->ifindex, 0);
}

/* The backend that service svc_id's table names for slot. Returns 0, or
 * -1 when the service has no table or the slot no backend. */
static __always_inline int table_pick(__u32 svc_id, __u32 slot, __u32 *bid, __be32 *addr)
{
	void *table = bpf_map_lookup_elem(&maglev_tables, &svc_id);
	if (!table)
		return -1;
	xlb_table_entry *entry = bpf_map_lookup_elem(table, &slot);
	if (!entry)
		return -1;
	*bid = xlb_table_entry_bid(*entry);
	*addr = xlb_table_entry_addr(*entry);
	/* Address 0: no backend, or an IPv6 one (xlb_table_entry_v6), which
	 * the stateless path leaves to xlb_lb_to6; the others drop it (the
	 * control plane gives them no IPv6 backends). */
	return *addr ? 0 : -1;
}

/* A TCP segment that opens a connection: SYN without ACK. A header too
 * short to hold the flags is not one. */
static __always_inline int tcp_syn(struct pkt *p, void *data_end)
{
	__u8 *tcp = (void *)p->ip + p->ip->ihl * 4;

	if ((void *)(tcp + 14) > data_end)
		return 0;
	return (tcp[13] & (XLB_TCP_SYN | XLB_TCP_ACK)) == XLB_TCP_SYN;
}

/* Whether a flow entry's backend id still stands for the address the
 * entry carries and counts for the service. When it does not (the backend
 * left the configuration, and its id may be another's by now), the flow
 * still goes to the address it has been going to, as a stateful load
 * balancer drains a removed backend, but as an orphan (xlb_forward). */
static __always_inline int ct_valid(const struct ct_entry *ct, __u32 svc_id)
{
	struct backend *be = bpf_map_lookup_elem(&backends, &ct->bid);

	return be && xlb_addr_eq(&be->addr, &ct->addr) &&
	       be->owner == svc_id + 1;
}

/* What ct_pick found besides an IPv4 backend: the flow's entry names an
 * IPv6 backend, or the table's slot does (or names no backend at all,
 * which xlb_lb_stateful_to6 drops). Either goes there, out of line. */
#define CT_TO6_ENTRY 1
#define CT_TO6_TABLE 2

/* The backend of a stateful service's flow: the one its entry names while
 * that backend is in the service, SYN or not, so that a SYN forged with a
 * live client's address and port (no sequence numbers needed) cannot move
 * the connection. A flow without an entry, or a SYN of a flow whose
 * backend left the configuration, gets the table's, recorded for the
 * flow's next packets; any other packet of such a flow goes on to the
 * backend that left, as an orphan (*orphan, see ct_valid). An ICMP error
 * about a flow follows the entry but never makes one. Returns 0 for an
 * IPv4 backend, or CT_TO6_ENTRY / CT_TO6_TABLE when the backend is the
 * entry's or the table's and not IPv4 (counted here, recorded there). */
static __always_inline int ct_pick(struct pkt *p, void *data_end, __be32 vip, __u32 svc_id,
				   __u32 slot, __u32 *bid, __be32 *addr, int *orphan)
{
	struct ct_key key = {
		.saddr = XLB_ADDR4(p->flow_src),
		.daddr = XLB_ADDR4(vip),
		.sport = p->sport,
		.dport = p->dport,
		.proto = p->proto,
	};
	int own = p->ip->protocol == p->proto; /* not an ICMP error */
	int tcp = own && p->proto == IPPROTO_TCP;
	int syn = tcp && tcp_syn(p, data_end);
	struct ct_entry *ct = bpf_map_lookup_elem(&conntrack, &key);

	if (ct && (ct->addr.w[0] | ct->addr.w[1] | ct->addr.w[2] | ct->addr.w[3])) {
		int gone = !ct_valid(ct, svc_id);
		int v6 = ct->addr.w[0] | ct->addr.w[1] | (ct->addr.w[2] ^ bpf_htonl(0xffff));

		if (!(gone && syn)) {
			if (v6)
				return CT_TO6_ENTRY;
			*bid = ct->bid;
			*addr = xlb_addr_v4(&ct->addr);
			*orphan = gone;
			return 0;
		}
	} else if (tcp && !syn) {
		count_reason(XLB_NOTE_CT_MIDFLOW_MISS);
	}
	if (table_pick(svc_id, slot, bid, addr))
		return CT_TO6_TABLE;
	if (own) {
		struct ct_entry val = { .bid = *bid, .addr = XLB_ADDR4(*addr) };

		if (!bpf_map_update_elem(&conntrack, &key, &val, BPF_ANY))
			count_reason(XLB_NOTE_CT_NEW);
	}
	return 0;
}

/* The source port the flow hash sees: none for a service with client-IP
 * affinity (XLB_SVC_CLIENT_IP), so that every connection of a client,
 * TCP or UDP, and every ICMP error about one, takes the same slot. */
static __always_inline __be16 hashed_sport(__be16 sport, __u8 flags)
{
	return (flags & XLB_SVC_CLIENT_IP) ? 0 : sport;
}

/* What the GUE outer source port takes its bits from: the flow hash,
 * with the source port the hash left out mixed back in, so that the
 * connections of one client still spread over the backend's receive
 * queues. Without affinity, the flow hash itself. */
static __always_inline __u32 tunnel_hash(__u32 hash, __be16 sport, __be16 hsport)
{
	return hash ^ (__u32)(sport ^ hsport);
}

/* hash * size / 2^32 spreads the hash over the table like a modulo,
 * without a division (Lemire's fast range reduction). */
static __always_inline __u32 flow_slot(__u32 hash)
{
	return ((__u64)hash * table_size) >> 32;
}

/* Forward to the chosen backend in the service's encapsulation: one
 * inlined copy of xlb_forward per mode. Daisy-chained services take
 * xlb_lb_chained instead, and are never stateful (the control plane
 * refuses it); a slot that said both anyway would go out as plain GUE,
 * which backends take as a packet without a hint. */
static __always_inline int xlb_encap_forward(struct xdp_md *ctx, struct pkt *p, void *data_end,
					     __u32 bid, __be32 be_addr, __u32 hash, __u8 mode, int orphan)
{
	if (encap_is_gue(mode))
		return xlb_forward(ctx, p, data_end, bid, be_addr, hash, XLB_ENCAP_GUE, 0, orphan);
	return xlb_forward(ctx, p, data_end, bid, be_addr, hash, XLB_ENCAP_IPIP, 0, orphan);
}

static __noinline int xlb_lb_chained_to6(struct xdp_md *ctx, void *chain,
					 struct chain_entry *e, __u32 hash);

/* The rest of the path for a daisy-chained service: backend and hint come
 * from one entry of its chain table (chain_tables says why), the
 * generation from the entry after the last slot. A slot of an IPv6
 * backend (or none) goes to xlb_lb_chained_to6 (xlb_lb6.h) on the
 * branch that dropped it before, which left the rest of xlb_lb's code as
 * it was (any other test moved its registers). */
static __always_inline int xlb_lb_chained(struct xdp_md *ctx, struct pkt *p, void *data_end,
					  __u32 hash, __u32 svc_id, __u32 slot)
{
	struct xlb_gue_hint hint = {};
	__u32 last = table_size;
	struct chain_entry *e;

	void *chain = bpf_map_lookup_elem(&chain_tables, &svc_id);
	if (!chain)
		return drop(XLB_DROP_NO_BACKEND);
	e = bpf_map_lookup_elem(chain, &slot);
	if (!e || !xlb_addr_v4(&e->addr))
		/* An IPv6 backend (its address in the registry), or none. */
		return xlb_lb_chained_to6(ctx, chain, e, hash);
	__u32 bid = e->bid;
	__be32 be_addr = xlb_addr_v4(&e->addr);

	hint.prev = xlb_addr_v4(&e->prev);
	hint.prev2 = xlb_addr_v4(&e->prev2);
	hint.changed = bpf_htonl(e->changed);
	e = bpf_map_lookup_elem(chain, &last);
	if (e)
		hint.generation = bpf_htonl(e->changed);
	return xlb_forward(ctx, p, data_end, bid, be_addr, hash, XLB_ENCAP_GUE_HINT, &hint, 0);
}

/* A stateful IPv4 flow whose backend is IPv6 (xlb_lb6.h). The flow
 * comes as scalars, not as its struct pkt, whose address would pin the
 * struct to the IPv4 path's stack (a BPF call takes five arguments):
 * svc: the service's ID, CT_TO6_* << 14, mode << 16, CT_TO6_AFFINITY
 * when the hash left the source port out (client-IP affinity), the
 * protocol << 24; ports: the source port and the destination port << 16,
 * as on the wire. */
#define CT_TO6_AFFINITY (1u << 20)
static __noinline int xlb_lb_stateful_to6(struct xdp_md *ctx, __u32 svc, __u32 ports,
					  __be32 flow_src, __u32 hash);

/* The rest of the path for a stateful service: a path of its own, so that
 * the flow key it needs after hashing costs the stateless path nothing. */
static __always_inline int xlb_lb_stateful(struct xdp_md *ctx, struct pkt *p, void *data_end,
					   __be32 vip, __u32 svc_id, __u8 mode, __be16 hsport)
{
	__u32 hash = xlb_flow_hash(p->flow_src, vip, hsport, p->dport, p->proto);
	__u32 slot = flow_slot(hash);
	__u32 bid;
	__be32 be_addr;
	int orphan = 0;
	int r = ct_pick(p, data_end, vip, svc_id, slot, &bid, &be_addr, &orphan);

	if (r)
		return xlb_lb_stateful_to6(ctx,
					   svc_id | (__u32)r << 14 | (__u32)mode << 16 |
						   (hsport ? 0 : CT_TO6_AFFINITY) | (__u32)p->proto << 24,
					   (__u32)p->sport | (__u32)p->dport << 16, p->flow_src, hash);
	return xlb_encap_forward(ctx, p, data_end, bid, be_addr, tunnel_hash(hash, p->sport, hsport),
				 mode, orphan);
}

/* NAT and DNAT services: their own path, built on the helpers above. */
#include "xlb_lbnat.h"

/* IPv6, and IPv4 VIPs with IPv6 backends. */
#include "xlb_lb6.h"

static __always_inline int xlb_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt p = {};

	switch (parse_ipv4(data, data_end, &p)) {
	case PARSE_OK:
		break;
	case PARSE_NOT_IPV4:
		if (p.eth->h_proto == bpf_htons(ETH_P_IPV6)) {
			/* Layer-2 mode: a neighbour solicitation for a VIP. The
			 * test costs other IPv6 packets a load and a compare. */
			struct ipv6hdr *ip6 = (void *)(p.eth + 1);
			__u8 *icmp6 = (void *)(ip6 + 1);

			if ((void *)(icmp6 + 1) <= data_end && ip6->nexthdr == IPPROTO_ICMPV6 && *icmp6 == ICMPV6_NS) {
				int v = xlb_ndp(ctx);

				if (v >= 0)
					return v;
			}
			return xlb_lb6_reply(ctx);
		}
		if (p.eth->h_proto == bpf_htons(ETH_P_ARP)) {
			enum arp_result r = xlb_arp(p.eth, data_end);

			if (r == ARP_REPLY) {
				count_reason(XLB_TX_ARP_REPLY);
				return XDP_TX;
			}
			if (r == ARP_EXPIRED)
				return pass(XLB_PASS_ARP_EXPIRED);
		}
		return pass(XLB_PASS_NOT_IPV4);
	case PARSE_NOT_TCP_UDP:
		if (!is_vip(p.ip->daddr)) {
			/* An ICMP error about a NAT session's packet to its
			 * backend goes back to the session's client. */
			if (p.ip->protocol == IPPROTO_ICMP && lbnat_on()) {
				int v = xlb_lb_nat_reply_icmp(ctx);

				if (v >= 0)
					return v;
			}
			return pass(XLB_PASS_NOT_TCP_UDP);
		}
		if (deny_v4(p.ip->saddr))
			return drop(XLB_DROP_DENIED);
		/* Pruned by the verifier when off. */
		if (ping_vips) {
			enum ping_result r = vip_ping(&p, data_end);

			if (r == PING_REPLY) {
				count_reason(XLB_TX_PING_REPLY);
				return XDP_TX;
			}
			if (r == PING_REFUSED)
				return drop(XLB_DROP_PING_REFUSED);
		}
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
		if (!is_vip(vip))
			return pass(XLB_PASS_NO_SERVICE);
		if (deny_v4(ip->saddr))
			return drop(XLB_DROP_DENIED);
		lbnat_count_fragment(ctx);
		return drop(XLB_DROP_FRAGMENT);
	}

	struct svc_slot *svc = svc_lookup(vip, p.dport, p.proto);
	if (!svc) {
		if (!is_vip(vip)) {
			/* A NAT session's reply comes back to the node. */
			if (lbnat_on()) {
				int v = xlb_lb_nat_reply(ctx);

				if (v >= 0)
					return v;
			}
			return pass(XLB_PASS_NO_SERVICE);
		}
		if (deny_v4(ip->saddr))
			return drop(XLB_DROP_DENIED);
		return drop(XLB_DROP_VIP_NO_SERVICE);
	}
	/* Who may reach the service, before anything else is looked up: the
	 * node's deny list first, then the service's own ranges, which an
	 * ICMP error passes by the client of the flow it quotes. */
	if (deny_v4(ip->saddr))
		return drop(XLB_DROP_DENIED);
	__u32 svc_id = svc->id;

	if ((svc->flags & XLB_SVC_SOURCE_RANGES) && !source_allowed4(svc_id, p.flow_src)) {
		count_source_drop(svc_id, p.ip_len);
		return drop(XLB_DROP_SOURCE_RANGE);
	}
	if (ip->ttl <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);

	__u8 mode = svc->encap;

	/* The stateful path is taken only after the stateless one's hash:
	 * tested before it, the branch kept more values alive over the hash
	 * (docs/decisions/0001-lb-fast-path.md). */
	__u8 flags = svc->flags;
	__u8 stateful = flags & XLB_SVC_STATEFUL;
	__be16 hsport = hashed_sport(p.sport, flags);

	__u32 hash = xlb_flow_hash(p.flow_src, vip, hsport, p.dport, p.proto);
	__u32 slot = flow_slot(hash);
	__u32 bid;
	__be32 be_addr;

	if (stateful)
		return xlb_lb_stateful(ctx, &p, data_end, vip, svc_id, mode, hsport);
	/* One test for the rarer modes, so that IPIP and GUE pay no more. */
	if (mode > XLB_ENCAP_GUE) {
		if (mode == XLB_ENCAP_GUE_HINT)
			return xlb_lb_chained(ctx, &p, data_end, tunnel_hash(hash, p.sport, hsport),
					      svc_id, slot);
		if (ip->protocol == IPPROTO_ICMP)
			return xlb_lb_nat_icmp(ctx, svc);
		return xlb_lb_nat(ctx, svc, hash);
	}
	if (table_pick(svc_id, slot, &bid, &be_addr))
		/* No IPv4 address: an IPv6 backend, or none. */
		return xlb_lb_to6(ctx, svc_id, slot, tunnel_hash(hash, p.sport, hsport), mode);
	return xlb_encap_forward(ctx, &p, data_end, bid, be_addr, tunnel_hash(hash, p.sport, hsport),
				 mode, 0);
}

#endif
