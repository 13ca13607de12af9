/* Maps of the LB program. Keys and values are plain structs without
 * implicit padding so that Go writes them byte for byte. */
#ifndef XLB_MAPS_H
#define XLB_MAPS_H

#include "xlb_helpers.h"

/* A service index slot. The first 8 bytes are the key (VIP, port,
 * protocol) plus the encapsulation; vip 0 marks a free slot: port 0 an
 * empty one (ends a probe), port 0xffff a deleted one (probing goes on).
 * The control plane fills a slot with vip 0 first and sets vip in a
 * second write, so a packet never sees a half-written service. */
struct svc_slot {
	__be32 vip;
	__be16 port;
	__u8 proto;
	__u8 encap;  /* XLB_ENCAP_* */
	__u32 id;    /* index into maglev_tables, chain_tables and svc_retired */
	__u8 flags;  /* XLB_SVC_* */
	__u8 pad[3];
};

/* The backend registry (id -> address): written and read by the control
 * plane, which copies addresses into the tables. Of the fast path only
 * stateful services read it, to check that the backend a flow entry names
 * still exists and still counts for the service. */
struct backend {
	__be32 addr;
	__u32 owner; /* id + 1 of the service whose table names it; 0: none yet */
};

/* Services, looked up without hashing in the kernel: an array lookup is
 * inlined by the verifier, while a hash map lookup cost about 30 ns, a
 * third of the whole path (docs/benchmarks.md). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_SVC_SLOTS);
	__type(key, __u32);
	__type(value, struct svc_slot);
} svc_index SEC(".maps");

/* VIP addresses (any port), for the packets that are not a service's:
 * fragments, other ports and protocols, ICMP errors. Value: number of
 * services. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __be32);
	__type(value, __u32);
} vips SEC(".maps");

/* The VIP filter (XLB_VIP_FILTER_BITS): bit vip_filter_bit(vip) is set
 * for every address in vips. The control plane sets a VIP's bit before it
 * adds the VIP to vips and clears it only once no VIP in vips has it, so a
 * clear bit always means "not a VIP". */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_VIP_FILTER_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} vip_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

/* One Maglev table per service: slot -> backend id (low 32 bits) and
 * address (high 32 bits, as the program loads a __be32) in one 64-bit
 * entry, so that the fast path needs no backends lookup. The control
 * plane builds a complete new inner map and swaps the outer slot in one
 * update, so a packet sees either the old or the new table, never a
 * mix. An entry with address 0 has no backend: its packets are dropped. */

struct maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	/* Mappable, so that the control plane writes a new table with one
	 * copy instead of one kernel update per slot (internal/dataplane,
	 * fill.go). Lookups stay inlined. */
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XLB_DEFAULT_TABLE_SIZE);
	__type(key, __u32);
	__type(value, __u64);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__array(values, struct maglev_inner);
} maglev_tables SEC(".maps");

/* The tables of daisy-chained services (Beamer, XLB_ENCAP_GUE_HINT): one
 * inner map per service, swapped whole. Entry [slot] holds the slot's
 * backend, as the Maglev table does, with its previous owner, the owner
 * before that, and when the slot last changed hands; entry [table_size]
 * holds, in changed, the service's table generation. Backend and hints
 * in one entry change in one swap: with two maps, a packet between the
 * two swaps could carry a hint that names neither the backend it reaches
 * nor the one that holds its connection. Such a service's packets read
 * only this map (its maglev_tables entry is kept for the control plane). */
struct chain_entry {
	__u32 bid;     /* backend id, as in maglev_tables */
	__be32 addr;   /* its address; 0: no backend (drop) */
	__be32 prev;   /* previous owner; 0: none */
	__be32 prev2;  /* the owner before prev; 0: none */
	__u32 changed; /* unix seconds, host order; 0: never */
};

/* The inner map names its value by an anonymous twin of struct
 * chain_entry: clang before 17 describes a named struct that only a
 * nested map definition uses as a forward declaration, which loaders
 * cannot size. */
struct chain_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* as maglev_inner */
	__uint(max_entries, XLB_DEFAULT_TABLE_SIZE + 1);
	__type(key, __u32);
	__type(value, struct { __u32 bid; __be32 addr; __be32 prev; __be32 prev2; __u32 changed; });
};

#define XLB_CHAIN_VALUE typeof(*((struct chain_inner *)0)->value)
_Static_assert(sizeof(XLB_CHAIN_VALUE) == sizeof(struct chain_entry) &&
		       __builtin_offsetof(XLB_CHAIN_VALUE, changed) ==
			       __builtin_offsetof(struct chain_entry, changed),
	       "chain_inner's value and struct chain_entry differ");
#undef XLB_CHAIN_VALUE

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__array(values, struct chain_inner);
} chain_tables SEC(".maps");

/* Flow state of stateful services (XLB_SVC_STATEFUL): the backend each
 * flow got, keyed by the flow as the hash sees it (so ICMP errors about a
 * flow find it too). An LRU: a full table evicts the oldest flows, whose
 * next packets take the table's backend again. */
struct ct_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct ct_entry {
	__u32 bid;
	__be32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XLB_CONNTRACK_SIZE);
	__type(key, struct ct_key);
	__type(value, struct ct_entry);
} conntrack SEC(".maps");

/* A service's packets and bytes are the sum of its backends' (every
 * backend id belongs to one service, recorded in struct backend), so the
 * fast path counts once per packet. What backends that are gone had
 * counted is kept here by the control plane; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} svc_retired SEC(".maps");

/* Next-hop cache: the result of bpf_fib_lookup for a backend, per CPU,
 * so that most packets skip the FIB (it costs more than everything else
 * on the path together). An entry holds while its generation equals the
 * global nh_gen and for at most XLB_NH_MAX_AGE jiffies: the agent bumps
 * nh_gen whenever the kernel's neighbours, routes or links change,
 * whenever a backend changes, and once a second regardless, and starts it
 * at a random value when it loads a program. nh_gen is always odd, so an
 * entry never filled (generation 0) never matches; the age limit bounds how
 * stale an entry can get while no agent runs. max_len is the largest
 * outer packet the route is known to carry: a larger one goes through the
 * FIB, which checks the MTU. */
struct nh_entry {
	__u64 stamp; /* jiffies when filled */
	__u32 gen;
	__u32 ifindex;
	/* The new Ethernet header's addresses, destination then source, as
	 * three words so that writing them takes three stores. */
	__u32 macs[3];
	__u16 max_len;
	__u8 pad0;
	__u8 pad;
};

/* Per backend and CPU: its counters and its cached next hop, together so
 * that one lookup serves both. */
struct backend_state {
	struct xlb_counter stats;
	struct nh_entry nh;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend_state);
} backend_stats SEC(".maps");

/* The next-hop generation: a global (in .bss, written by the agent through
 * a memory mapping), so reading it costs no map lookup. It belongs to one
 * loaded program and is never pinned. */
volatile __u32 nh_gen = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_REASON_MAX);
	__type(key, __u32);
	__type(value, __u64);
} reasons SEC(".maps");

/* Home slot of a service key (internal/dataplane has it in Go): the
 * 64-bit finalizer of MurmurHash3 over the key as svc_lookup compares it
 * (the words enter as little-endian loads of their wire bytes). Every key
 * bit reaches every slot bit, so VIPs of one subnet, or ports of one VIP,
 * land like random keys; the previous hash let a VIP's last octet reach
 * three slot bits, and 64 services of one /24 filled the index. Changing
 * it moves every service: see XLB_SVC_SLOTS. */
static __always_inline __u32 svc_hash(__be32 vip, __be16 port, __u8 proto)
{
	return (__u32)fmix64((__u64)vip | ((__u64)port << 32) | ((__u64)proto << 48));
}

/* Step i of the probe for the service key want from home slot h: the
 * service's slot, or 0; *end says the probe ends here (found, an empty
 * slot, or none), else it goes on past another service's slot or a
 * deleted one. */
static __always_inline struct svc_slot *svc_probe_at(__u64 want, __u32 h, int i, int *end)
{
	__u32 idx = (h + i) & (XLB_SVC_SLOTS - 1);
	struct svc_slot *s = bpf_map_lookup_elem(&svc_index, &idx);

	if (!s) {
		*end = 1;
		return 0;
	}
	__u64 got = *(const __u64 *)s & 0x00ffffffffffffffULL;
	*end = got == want || !got;
	return got == want ? s : 0;
}

/* The probe past a service's home slot (svc_lookup), out of line: few
 * services sit past their home, and the unrolled loop inlined cost every
 * lookup registers and about 2 ns (bench/lbbench). */
static __noinline struct svc_slot *svc_probe(__u64 want, __u32 h)
{
	int end;

#pragma unroll
	for (int i = 1; i < XLB_SVC_PROBES; i++) {
		struct svc_slot *s = svc_probe_at(want, h, i, &end);

		if (end)
			return s;
	}
	return 0;
}

static __always_inline struct svc_slot *svc_lookup(__be32 vip, __be16 port, __u8 proto)
{
	__u64 want = (__u64)vip | ((__u64)port << 32) | ((__u64)proto << 48);
	__u32 h = svc_hash(vip, port, proto);
	int end;
	struct svc_slot *s = svc_probe_at(want, h, 0, &end);

	return end ? s : svc_probe(want, h);
}

/* The VIP filter's bit for an address (internal/dataplane has it in Go):
 * the top XLB_VIP_FILTER_BITS bits of a multiplicative hash of the
 * address as the program loads it, its halves folded together first. The
 * product's top bits depend on every bit of the factor only through
 * carries from below, so without the fold the addresses of one /16 would
 * share a few of the bits' 2^20 values. */
static __always_inline __u32 vip_filter_bit(__be32 addr)
{
	__u32 h = (__u32)addr ^ ((__u32)addr >> 16);

	return (h * 0x9e3779b1u) >> (32 - XLB_VIP_FILTER_BITS);
}

/* Whether addr is a VIP, that is in vips: the filter answers "no" for
 * almost every other address without the hash map. */
static __always_inline int is_vip(__be32 addr)
{
	__u32 bit = vip_filter_bit(addr);
	__u32 word = bit >> 6;
	__u64 *w = bpf_map_lookup_elem(&vip_filter, &word);

	if (!w || !(*w & (1ULL << (bit & 63))))
		return 0;
	return bpf_map_lookup_elem(&vips, &addr) != 0;
}

static __always_inline void count_reason(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&reasons, &reason);

	if (n)
		*n += 1;
}

#endif
