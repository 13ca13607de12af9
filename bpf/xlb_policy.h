/* Who may reach a VIP: the node's deny list and each service's source
 * ranges, checked before any table lookup. Both are built in Go and
 * swapped in whole (one inner map each), so a packet sees the old list or
 * the new one, never a half-built one; both cost the same whatever they
 * hold (docs/decisions/0005-policy.md). */
#ifndef XLB_POLICY_H
#define XLB_POLICY_H

#include "xlb_maps.h"

/* The deny table's cells: a root of 2^XLB_DENY_ROOT_BITS 32-bit entries,
 * 8 per cell, then room for one node cell and one leaf cell per prefix.
 * The inner map has this size whatever the list holds, as a map-in-map's
 * inner maps share one size (which keeps their lookups inlined). */
#define XLB_DENY_ROOT_CELLS ((1 << XLB_DENY_ROOT_BITS) / 8)
#define XLB_DENY_CELLS (XLB_DENY_ROOT_CELLS + 2 * XLB_DENY_MAX_PREFIXES)
_Static_assert(XLB_DENY_NODE_BITS == 6 && XLB_DENY_ROOT_BITS + XLB_DENY_NODE_BITS == 24,
	       "a node's bitmaps are 64-bit words, and a leaf is a /24's 256 bits");

/* The deny table of one address family: an inner map swapped whole.
 * Its size is fixed, as a map-in-map's inner maps share one, which keeps
 * the lookups inlined. Its value is an anonymous twin of union
 * xlb_deny_cell, for the reason chain_inner's is (xlb_maps.h). */
struct deny_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* filled with one copy, as maglev_inner */
	__uint(max_entries, XLB_DENY_CELLS);
	__type(key, __u32);
	__type(value, union {
		__u32 w[8];
		__u64 q[4];
	});
};

_Static_assert(sizeof(*((struct deny_inner *)0)->value) == sizeof(union xlb_deny_cell),
	       "deny_inner's value and union xlb_deny_cell differ");

/* The IPv4 deny table at key 0; none: no deny list. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct deny_inner);
} deny4 SEC(".maps");

/* The IPv6 deny table: an inner map swapped whole, as deny_inner. Its
 * value is an anonymous twin of struct xlb_deny6_node. */
struct deny6_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XLB_DENY6_NODES);
	__type(key, __u32);
	__type(value, struct {
		__u64 deny[4];
		__u64 kids[4];
		__u64 pre_hi;
		__u64 pre_lo;
		__u32 first;
		__u16 before[4];
		__u8 depth;
		__u8 pad[3];
	});
};

_Static_assert(sizeof(*((struct deny6_inner *)0)->value) == sizeof(struct xlb_deny6_node),
	       "deny6_inner's value and struct xlb_deny6_node differ");

/* The IPv6 deny table at key 0; none: no IPv6 prefix in the list. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct deny6_inner);
} deny6 SEC(".maps");

/* A service's IPv4 source ranges, one value swapped whole. The value is
 * named by an anonymous twin of struct xlb_ranges4, for the reason
 * chain_inner's is (xlb_maps.h). */
struct ranges_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct {
		__u32 lo[XLB_SVC_MAX_RANGES];
		__u32 hi[XLB_SVC_MAX_RANGES];
	});
};

_Static_assert(sizeof(*((struct ranges_inner *)0)->value) == sizeof(struct xlb_ranges4),
	       "ranges_inner's value and struct xlb_ranges4 differ");

/* Source ranges by service ID, for the services whose index slot has
 * XLB_SVC_SOURCE_RANGES. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__array(values, struct ranges_inner);
} svc_ranges4 SEC(".maps");

/* IPv6 source ranges, as svc_ranges4 (struct xlb_ranges6). */
struct ranges6_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct {
		__u64 lo_hi[XLB_SVC_MAX_RANGES];
		__u64 lo_lo[XLB_SVC_MAX_RANGES];
		__u64 hi_hi[XLB_SVC_MAX_RANGES];
		__u64 hi_lo[XLB_SVC_MAX_RANGES];
	});
};

_Static_assert(sizeof(*((struct ranges6_inner *)0)->value) == sizeof(struct xlb_ranges6),
	       "ranges6_inner's value and struct xlb_ranges6 differ");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__array(values, struct ranges6_inner);
} svc_ranges6 SEC(".maps");

/* Packets and bytes dropped per service for a source outside its ranges
 * (XLB_DROP_SOURCE_RANGE), by service ID. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} svc_src_drops SEC(".maps");

/* Whether the deny table denies host-order IPv4 address a: at most three
 * inlined array reads. Out of line: a list is optional, and inlined its
 * registers would cost the path without one (see deny_v4). */
static __noinline int deny_lookup4(void *table, __u32 a)
{
	__u32 r = a >> (32 - XLB_DENY_ROOT_BITS);
	__u32 k = r >> 3;
	union xlb_deny_cell *c = bpf_map_lookup_elem(table, &k);

	if (!c)
		return 0;
	__u32 e = c->w[r & 7];

	if (e == 0)
		return 0;
	if (e == XLB_DENY_ALL)
		return 1;
	union xlb_deny_cell *n = bpf_map_lookup_elem(table, &e);

	if (!n)
		return 1; /* a table that points nowhere: fail closed */
	__u32 i = (a >> 8) & ((1 << XLB_DENY_NODE_BITS) - 1);
	__u64 bit = 1ULL << i;

	if (n->q[0] & bit)
		return 1;
	__u64 kids = n->q[1];

	if (!(kids & bit))
		return 0;
	__u32 leaf = n->w[4] + (__u32)__builtin_popcountll(kids & (bit - 1));
	union xlb_deny_cell *l = bpf_map_lookup_elem(table, &leaf);

	if (!l)
		return 1;
	__u32 b = a & 255;

	return (l->w[b >> 5] >> (b & 31)) & 1;
}

/* Whether the node's deny list holds IPv4 source saddr. Without a list,
 * one inlined read of deny4. */
static __always_inline int deny_v4(__be32 saddr)
{
	__u32 zero = 0;
	void *table = bpf_map_lookup_elem(&deny4, &zero);

	if (!table)
		return 0;
	return deny_lookup4(table, bpf_ntohl(saddr));
}

/* Whether the IPv6 deny table (deny6's inner map) holds source src (in
 * the packet): the walk down it, one node per byte where the list's
 * prefixes branch (struct xlb_deny6_node), at most 16 inlined array
 * reads whatever the list holds; it stops at the first byte no prefix
 * continues, or at bytes a compressed path skipped that are not the
 * node's. Out of line: a list is optional, and the IPv6 path's call
 * chain has no stack for the walk inlined. */
static __noinline int deny_walk6(void *table, const __be32 *src)
{
	__u32 i = 0;
	__u64 h = ((__u64)bpf_ntohl(src[0]) << 32) | bpf_ntohl(src[1]);
	__u64 l = ((__u64)bpf_ntohl(src[2]) << 32) | bpf_ntohl(src[3]);

#pragma unroll
	for (int k = 0; k < 16; k++) {
		struct xlb_deny6_node *n = bpf_map_lookup_elem(table, &i);

		if (!n)
			return 1; /* a table that points nowhere: fail closed */
		__u32 d = n->depth;
		__u64 mh, ml, x;

		if (d > 15)
			return 1;
		if (d < 8) {
			mh = d ? ~0ULL << (64 - 8 * d) : 0;
			ml = 0;
			x = h >> (56 - 8 * d);
		} else {
			mh = ~0ULL;
			ml = d > 8 ? ~0ULL << (128 - 8 * d) : 0;
			x = l >> (120 - 8 * d);
		}
		if (((h ^ n->pre_hi) & mh) | ((l ^ n->pre_lo) & ml))
			return 0; /* off the compressed path: no prefix covers it */
		__u32 b = x & 0xff;
		__u32 j = b >> 6;
		__u64 bit = 1ULL << (b & 63);

		if (n->deny[j] & bit)
			return 1;
		__u64 kids = n->kids[j];

		if (!(kids & bit))
			return 0;
		i = n->first + n->before[j] + (__u32)__builtin_popcountll(kids & (bit - 1));
	}
	return 0; /* the builder gives the last byte's nodes no children */
}

/* deny6's only key, as a constant: a key on the stack would cost the
 * IPv6 path's frame, which its call chain has no room for. */
static const __u32 deny6_key = 0;

/* Whether the node's IPv6 deny list holds source src: without a list,
 * one inlined read of deny6, as deny_v4 reads deny4. */
static __always_inline int deny_v6(const __be32 *src)
{
	void *table = bpf_map_lookup_elem(&deny6, &deny6_key);

	return table && deny_walk6(table, src);
}

/* Whether host-order IPv4 address a is in the ranges of one service: a
 * binary search of fixed depth (log2 XLB_SVC_MAX_RANGES steps) for the
 * last range starting at or below a. */
static __noinline int ranges_hold4(struct xlb_ranges4 *r, __u32 a)
{
	__u32 i = 0;

#pragma unroll
	for (__u32 s = XLB_SVC_MAX_RANGES / 2; s; s >>= 1) {
		if (r->lo[(i + s) & (XLB_SVC_MAX_RANGES - 1)] <= a)
			i += s;
	}
	i &= XLB_SVC_MAX_RANGES - 1;
	return r->lo[i] <= a && a <= r->hi[i];
}

/* Whether IPv4 source saddr may reach service svc_id, whose slot says it
 * has source ranges. A service flagged so whose ranges are missing lets
 * nobody in: the flag is set only once they are in place. */
static __always_inline int source_allowed4(__u32 svc_id, __be32 saddr)
{
	void *inner = bpf_map_lookup_elem(&svc_ranges4, &svc_id);
	__u32 zero = 0;

	if (!inner)
		return 0;
	struct xlb_ranges4 *r = bpf_map_lookup_elem(inner, &zero);

	if (!r)
		return 0;
	return ranges_hold4(r, bpf_ntohl(saddr));
}

/* a <= b for 128-bit numbers given as high and low halves. */
static __always_inline int le128(__u64 ah, __u64 al, __u64 bh, __u64 bl)
{
	return ah < bh || (ah == bh && al <= bl);
}

/* Whether IPv6 source src (in the packet) may reach service svc_id,
 * whose slot says it has source ranges: source_allowed4's binary search
 * over 128-bit numbers. Out of line: the IPv6 path has no stack left
 * for it inlined. */
static __noinline int source_allowed6(__u32 svc_id, const __be32 *src)
{
	void *inner = bpf_map_lookup_elem(&svc_ranges6, &svc_id);
	__u32 zero = 0;

	if (!inner)
		return 0;
	struct xlb_ranges6 *r = bpf_map_lookup_elem(inner, &zero);

	if (!r)
		return 0;
	__u64 h = ((__u64)bpf_ntohl(src[0]) << 32) | bpf_ntohl(src[1]);
	__u64 l = ((__u64)bpf_ntohl(src[2]) << 32) | bpf_ntohl(src[3]);
	__u32 i = 0;

#pragma unroll
	for (__u32 s = XLB_SVC_MAX_RANGES / 2; s; s >>= 1) {
		__u32 j = (i + s) & (XLB_SVC_MAX_RANGES - 1);

		if (le128(r->lo_hi[j], r->lo_lo[j], h, l))
			i += s;
	}
	i &= XLB_SVC_MAX_RANGES - 1;
	return le128(r->lo_hi[i], r->lo_lo[i], h, l) && le128(h, l, r->hi_hi[i], r->hi_lo[i]);
}

/* Count a packet of service svc_id dropped for its source. */
static __always_inline void count_source_drop(__u32 svc_id, __u16 len)
{
	struct xlb_counter *c = bpf_map_lookup_elem(&svc_src_drops, &svc_id);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

#endif
