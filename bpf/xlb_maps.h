/* Maps of the LB program. Keys and values are plain structs without
 * implicit padding so that Go writes them byte for byte. */
#ifndef XLB_MAPS_H
#define XLB_MAPS_H

#include "xlb_helpers.h"

struct svc_key {
	__be32 vip;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct svc_val {
	__u32 id;    /* index into maglev_tables and svc_stats */
	__u8 encap;  /* XLB_ENCAP_* */
	__u8 pad[3];
};

struct backend {
	__be32 addr;
	__u32 flags; /* reserved */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, struct svc_key);
	__type(value, struct svc_val);
} services SEC(".maps");

/* VIP addresses (any port): fragments are dropped only when addressed to
 * a VIP, everything else passes untouched. Value: number of services. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __be32);
	__type(value, __u32);
} vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

/* One Maglev table per service: slot -> backend id. The control plane
 * builds a complete new inner map and swaps the outer slot in one update,
 * so a packet sees either the old or the new table, never a mix. */
struct maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_DEFAULT_TABLE_SIZE);
	__type(key, __u32);
	__type(value, __u32);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__array(values, struct maglev_inner);
} maglev_tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} svc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} backend_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_REASON_MAX);
	__type(key, __u32);
	__type(value, __u64);
} reasons SEC(".maps");

/* Next-hop cache: the result of bpf_fib_lookup for a backend, per CPU,
 * so that most packets skip the FIB (it costs more than everything else
 * on the path together). An entry holds while its generation equals
 * nh_gen[0]; the agent bumps nh_gen whenever the kernel's neighbours,
 * routes or links change, whenever a backend changes, and once a second
 * regardless. max_len is the largest outer packet the route is known to
 * carry: a larger one goes through the FIB, which checks the MTU. Neither
 * map is pinned: a new program starts with an empty cache. */
struct nh_entry {
	__u32 gen;
	__u32 ifindex;
	__u16 max_len;
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u8 valid;
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct nh_entry);
} nh_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} nh_gen SEC(".maps");

static __always_inline void count_reason(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&reasons, &reason);

	if (n)
		*n += 1;
}

static __always_inline void count(void *map, __u32 id, __u64 bytes)
{
	struct xlb_counter *c = bpf_map_lookup_elem(map, &id);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

#endif
