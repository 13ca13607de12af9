// SPDX-License-Identifier: GPL-2.0
/* Benchmark programs for `make bench`: two floors and the LB path itself,
 * each wrapped so that BPF_PROG_TEST_RUN's repetitions see the same input
 * packet every time. The kernel runs the repetitions on one buffer; a
 * program that encapsulates would otherwise see its own output on the
 * second run. Every program pays the same save/restore, and wrap_only
 * measures that cost on its own so that it can be subtracted. */
#include "xlb_lb.h"

#define SAVE_LEN 64

struct saved {
	__u64 w[SAVE_LEN / 8];
};

/* 8 bytes at a time: x86 and arm64 load packet words at any alignment,
 * and a byte loop would make the harness dwarf what it measures. */
static __always_inline void copy64(__u64 *dst, const __u64 *src)
{
#pragma unroll
	for (int i = 0; i < SAVE_LEN / 8; i++)
		dst[i] = src[i];
}

static __always_inline int save(struct xdp_md *ctx, struct saved *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (data + SAVE_LEN > data_end)
		return -1;
	copy64(s->w, data);
	return 0;
}

/* Undo whatever the program did to the front of the packet. */
static __always_inline int pkt_len(struct xdp_md *ctx)
{
	int len = (int)((void *)(long)ctx->data_end - (void *)(long)ctx->data);

	/* Keep the compiler from folding two lengths into pointer + pointer,
	 * which the verifier refuses. */
	asm volatile("" : "+r"(len));
	return len;
}

static __always_inline int restore(struct xdp_md *ctx, struct saved *s, int len)
{
	void *data;
	int grown = pkt_len(ctx) - len;

	if (grown && bpf_xdp_adjust_head(ctx, grown))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	if (data + SAVE_LEN > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	copy64(data, s->w);
	return 0;
}

#define WRAP(name, body)                                        \
	SEC("xdp") int name(struct xdp_md *ctx)                 \
	{                                                       \
		struct saved s;                                 \
		int len = pkt_len(ctx);                  \
		if (save(ctx, &s))                              \
			return XDP_ABORTED;                     \
		int v = body;                                   \
		if (restore(ctx, &s, len))                    \
			return XDP_ABORTED;                     \
		return v;                                       \
	}

static __always_inline int floor_parse(struct xdp_md *ctx)
{
	struct pkt p = {};

	if (parse_ipv4((void *)(long)ctx->data, (void *)(long)ctx->data_end, &p) != PARSE_OK)
		return XDP_DROP;
	return XDP_TX;
}

/* Parse and encapsulate to a fixed backend with fixed MACs: the LB path
 * without any lookup (no service, table, backend or FIB lookup, no
 * counters). No flow hash either: IPIP has no use for one, and the LB
 * program computes it only to pick the table slot. */
static __always_inline int floor_encap(struct xdp_md *ctx)
{
	struct pkt p = {};

	if (parse_ipv4((void *)(long)ctx->data, (void *)(long)ctx->data_end, &p) != PARSE_OK)
		return XDP_DROP;
	struct iphdr *ip = p.ip;
	__u32 macs[3] = { 0x02020202, 0x02020202, 0x02020202 };

	ipv4_decrease_ttl(ip);
	if (encap_ipv4(ctx, XLB_ENCAP_IPIP, node_addr, bpf_htonl(0x0a000302), 0, p.ip_len,
		       ip->tos, ip->frag_off & bpf_htons(IP_DF), 0, macs))
		return XDP_DROP;
	return XDP_TX;
}

/* Floor 2 with the route looked up for every packet: parse, encapsulate
 * to a fixed backend, bpf_fib_lookup towards it, its MACs, XDP_TX. The LB
 * program caches what this looks up (xlb_forward's next-hop cache). */
static __always_inline int floor_encap_fib(struct xdp_md *ctx)
{
	struct pkt p = {};
	__be32 be = bpf_htonl(0x0a000302);

	if (parse_ipv4((void *)(long)ctx->data, (void *)(long)ctx->data_end, &p) != PARSE_OK)
		return XDP_DROP;
	struct iphdr *ip = p.ip;
	struct bpf_fib_lookup fib = {};

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = IPPROTO_IPIP;
	fib.tot_len = p.ip_len + XLB_IPIP_OVERHEAD;
	fib.ipv4_src = node_addr;
	fib.ipv4_dst = be;
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_DROP;
	__u32 macs[3];

	__builtin_memcpy(macs, fib.dmac, ETH_ALEN);
	__builtin_memcpy((__u8 *)macs + ETH_ALEN, fib.smac, ETH_ALEN);
	ipv4_decrease_ttl(ip);
	if (encap_ipv4(ctx, XLB_ENCAP_IPIP, node_addr, be, 0, p.ip_len, ip->tos,
		       ip->frag_off & bpf_htons(IP_DF), 0, macs))
		return XDP_DROP;
	return XDP_TX;
}

/* Floor 2 for IPv6: parse the IPv6 header (and the extension headers
 * the LB skips) and the ports, hop limit, IPv6-in-IPv6 to a fixed backend
 * (fd00:3::2) with fixed MACs, XDP_TX: the IPv6 hit path without any
 * lookup. */
static __always_inline int floor_encap6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 p = {};
	union xlb_addr be = { .w = { bpf_htonl(0xfd000003), 0, 0, bpf_htonl(2) } };
	__u32 macs[3] = { 0x02020202, 0x02020202, 0x02020202 };

	if ((void *)((struct ethhdr *)data + 1) > data_end ||
	    ((struct ethhdr *)data)->h_proto != bpf_htons(ETH_P_IPV6))
		return XDP_DROP;
	if (parse_ipv6(data + sizeof(struct ethhdr), data_end, &p) != PARSE6_OK)
		return XDP_DROP;
	__u32 tos = bpf_ntohl(p.ip6->vtf) >> 20;

	p.ip6->hop_limit--;
	if (encap_any(ctx, XLB_ENCAP_IPIP, 1, 1, node_addr, &node_addr6, &be, 0, p.ip_len,
		      (__u8)tos, bpf_htons(IP_DF), macs, 0))
		return XDP_DROP;
	return XDP_TX;
}

/* The deny list as a kernel LPM trie, for the comparison with the deny
 * table the LB reads (docs/decisions/0005-policy.md): keys as xlb's
 * other LPM tries hold them, an IPv4 /n as /96+n of its mapped address. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, XLB_DENY_MAX_PREFIXES);
	__type(key, struct chain_peer_key);
	__type(value, __u8);
} bench_deny_lpm SEC(".maps");

/* Parse, then ask a deny structure about the source: floor 1 with one
 * lookup, in the LB's deny table (deny4, as the LB program reads it) or
 * in the LPM trie above. */
static __always_inline int floor_deny(struct xdp_md *ctx, const int lpm)
{
	struct pkt p = {};

	if (parse_ipv4((void *)(long)ctx->data, (void *)(long)ctx->data_end, &p) != PARSE_OK)
		return XDP_DROP;
	if (lpm) {
		struct chain_peer_key k = { .prefixlen = 128, .addr = XLB_ADDR4(p.ip->saddr) };

		if (bpf_map_lookup_elem(&bench_deny_lpm, &k))
			return XDP_DROP;
	} else if (deny_v4(p.ip->saddr)) {
		return XDP_DROP;
	}
	return XDP_TX;
}

/* The full-table NAT cases (docs/decisions/0007-nat-sessions.md): the
 * harness opens many sessions through the LB program, then fills these
 * arrays with one packet's addresses, ports and checksums per session,
 * client to VIP and backend to node, in a shuffled order. Each run
 * writes the next entry into the packet before the NAT path, so that
 * every run hits another session, as in a table that does not fit the
 * caches. wrap_pick pays the same and nothing else, to be subtracted. */
struct bench_tuple {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__sum16 ip_check;
	__sum16 tcp_check;
};

/* The TCP header's fields bench_pick writes. */
struct bench_tcp {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack;
	__be16 flags;
	__be16 window;
	__sum16 check;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_NAT_SESSIONS);
	__type(key, __u32);
	__type(value, struct bench_tuple);
} bench_nat_fwd_set SEC(".maps"), bench_nat_rev_set SEC(".maps");

/* How many entries the arrays hold, and where each case is in its array
 * (the runs are on one CPU). */
__u32 bench_nat_n;
__u32 bench_nat_fwd_i, bench_nat_rev_i, bench_pick_i;

/* Write the entry at *i into the packet and step *i. The counter itself
 * is the lookup's key: no room on the stack is needed, and the LB path
 * below has little to spare. */
static __always_inline int bench_pick(struct xdp_md *ctx, void *set, __u32 *i)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct bench_tcp *tcp = (void *)(ip + 1);

	if (*i >= bench_nat_n)
		*i = 0;
	struct bench_tuple *t = bpf_map_lookup_elem(set, i);

	*i += 1;
	if (!t || (void *)(tcp + 1) > data_end)
		return -1;
	ip->saddr = t->saddr;
	ip->daddr = t->daddr;
	ip->check = t->ip_check;
	tcp->source = t->sport;
	tcp->dest = t->dport;
	tcp->check = t->tcp_check;
	return 0;
}

/* WRAP for the full-table cases: the saved front of the packet is in a
 * global (the runs are on one CPU, one at a time), not on the stack, where
 * the LB path's calls leave no room for it beside bench_pick's. */
struct saved bench_pick_saved;

#define WRAP_PICK(name, set, i, body)                                  \
	SEC("xdp") int name(struct xdp_md *ctx)                        \
	{                                                              \
		int len = pkt_len(ctx);                                \
		if (save(ctx, &bench_pick_saved) || bench_pick(ctx, set, i)) \
			return XDP_ABORTED;                            \
		int v = body;                                          \
		if (restore(ctx, &bench_pick_saved, len))              \
			return XDP_ABORTED;                            \
		return v;                                              \
	}

WRAP(wrap_only, XDP_TX)
WRAP_PICK(wrap_pick, &bench_nat_fwd_set, &bench_pick_i, XDP_TX)
WRAP(floor_deny_table, floor_deny(ctx, 0))
WRAP(floor_deny_lpm, floor_deny(ctx, 1))
WRAP(floor_parse_tx, floor_parse(ctx))
WRAP(floor_parse_encap, floor_encap(ctx))
WRAP(floor_parse_encap_fib, floor_encap_fib(ctx))
WRAP(floor_parse_encap6, floor_encap6(ctx))
WRAP(bench_lb, xlb_lb(ctx))
WRAP_PICK(bench_lb_nat_fwd_full, &bench_nat_fwd_set, &bench_nat_fwd_i, xlb_lb(ctx))
WRAP_PICK(bench_lb_nat_rev_full, &bench_nat_rev_set, &bench_nat_rev_i, xlb_lb(ctx))

char LICENSE[] SEC("license") = "GPL";
