/* Maps of the LB program; their keys and values are in xlb_structs.h,
 * the code that reads them in xlb_svc.h and xlb_lb.h. */
#ifndef XLB_MAPS_H
#define XLB_MAPS_H

#include "xlb_helpers.h"

/* Services, looked up without hashing in the kernel: an array lookup is
 * inlined by the verifier, a hash map lookup is a call that costs a large
 * part of the path (docs/decisions/0001-lb-fast-path.md). */
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
	__type(key, union xlb_addr);
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

/* Layer-2 mode: the VIPs this node answers ARP for (xlb_arp.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_MAX_SERVICES);
	__type(key, union xlb_addr);
	__type(value, struct l2_owner);
} l2_owned SEC(".maps");

/* One Maglev table per service: slot -> xlb_table_entry (backend id and
 * address in one 64-bit entry), so that the fast path needs no backends
 * lookup. The control plane builds a complete new inner map and swaps the
 * outer slot in one update, so a packet sees either the old or the new
 * table, never a mix. An entry with address 0 has no backend: its packets
 * are dropped. */
struct maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	/* Mappable, so that the control plane writes a new table with one
	 * copy instead of one kernel update per slot (the LB's table
	 * store). Lookups stay inlined. */
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XLB_DEFAULT_TABLE_SIZE);
	__type(key, __u32);
	__type(value, xlb_table_entry);
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
 * only this map (its maglev_tables entry is kept for the control plane).
 * The inner map names its value by an anonymous twin of struct
 * chain_entry: clang before 17 describes a named struct that only a
 * nested map definition uses as a forward declaration, which loaders
 * cannot size. */
struct chain_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* as maglev_inner */
	__uint(max_entries, XLB_DEFAULT_TABLE_SIZE + 1);
	__type(key, __u32);
	__type(value, struct {
		__u32 bid;
		__u32 changed;
		union xlb_addr addr;
		union xlb_addr prev;
		union xlb_addr prev2;
	});
};

#define XLB_CHAIN_VALUE typeof(*((struct chain_inner *)0)->value)
_Static_assert(sizeof(XLB_CHAIN_VALUE) == sizeof(struct chain_entry) &&
		       __builtin_offsetof(XLB_CHAIN_VALUE, changed) ==
			       __builtin_offsetof(struct chain_entry, changed) &&
		       __builtin_offsetof(XLB_CHAIN_VALUE, prev2) ==
			       __builtin_offsetof(struct chain_entry, prev2),
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
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XLB_CONNTRACK_SIZE);
	__type(key, struct ct_key);
	__type(value, struct ct_entry);
} conntrack SEC(".maps");

/* NAT sessions (xlb_lbnat.h). A session is its reverse entry (the reply's
 * 5-tuple -> struct lbnat_session), which is also the claim of its port:
 * inserted with BPF_NOEXIST, so that no two sessions share a backend-side
 * 5-tuple; its forward entry (the client's 5-tuple -> the reverse key,
 * and for an established session what its client's packets need, so
 * that they read one entry: struct lbnat_fwd) finds it from the client's
 * side. Sessions not established yet
 * (embryonic: unanswered, or answered and not acknowledged by the client)
 * live in LRU maps of their own, the others in plain hashes that never
 * evict: a SYN flood churns the first and cannot touch the second. The
 * client's first packet after the backend's reply moves a session over
 * (a spoofed source never sends one). The plain hashes
 * allocate on use, so a node without NAT services pays little for them.
 * docs/decisions/0007-nat-sessions.md. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, XLB_NAT_SESSIONS);
	__type(key, struct lbnat_key);
	__type(value, struct lbnat_fwd);
} nat_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, XLB_NAT_SESSIONS);
	__type(key, struct lbnat_key);
	__type(value, struct lbnat_session);
} nat_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XLB_NAT_EMBRYONIC);
	__type(key, struct lbnat_key);
	__type(value, struct lbnat_key);
} nat_fwd_syn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XLB_NAT_EMBRYONIC);
	__type(key, struct lbnat_key);
	__type(value, struct lbnat_session);
} nat_rev_syn SEC(".maps");

/* The node's NAT settings, pinned, so that a new program has them before
 * its agent writes them. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lbnat_cfg);
} nat_cfg SEC(".maps");

/* The dnat backends whose packets are replies to look up: the program
 * adds a backend when it opens a session to it, the control plane removes
 * those that no service names and no session uses. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_NAT_DNAT_BACKENDS);
	__type(key, struct lbnat_be_key);
	__type(value, __u8);
} nat_dnat_be SEC(".maps");

/* Scratch space of the NAT path, per CPU: a packet's keys and a new
 * session do not fit on the stack beside the rest of the path (BPF allows
 * 512 bytes for the whole call chain). The control plane never reads it. */
struct lbnat_scratch {
	struct lbnat_key fk;     /* the client's packet */
	struct lbnat_key rk;     /* its session's reverse key */
	struct lbnat_key tmp;    /* another session's forward key, while a claim is made */
	struct lbnat_be_key bk;  /* a dnat backend being recorded */
	struct lbnat_session s;  /* a session being opened */
	struct lbnat_fwd f;      /* a session's established forward entry, being made */
	struct nh_entry nh;      /* a next hop cached nowhere (generation 0) */
	struct bpf_fib_lookup fib; /* the FIB's argument */
	__u64 h;                 /* the port hash of the flow being opened */
	__u32 range;             /* ports to draw from; 0: the claim as it is (dnat) */
	__u32 ok;                /* a claim was made */
	__u32 bid;               /* in: the backend a SYN's connection gets from the table now,
				  * plus one, 0: none (lbnat_pick_now); out: the backend id of
				  * the session found (lbnat_session_slow) */
	__be32 be;               /* the backend's address, as the table gives it */
	__u8 one;                /* nat_dnat_be's value */
	__u8 strict;             /* candidates below this skip ports in a backend's TIME_WAIT */
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lbnat_scratch);
} nat_scratch SEC(".maps");

/* Recent failures of port allocation per backend, per CPU (lbnat_open):
 * slot backend ID % XLB_NAT_HINT_SLOTS. A hint only: a slot shared by two
 * backends serves the last that failed. The control plane never reads
 * it. */
struct lbnat_port_hint {
	__u64 stamp;    /* when the last full search failed (coarse clock) */
	__u32 backend;  /* the backend ID the slot is about, plus one; 0: none */
	__u32 fails;    /* full searches failed in a row */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_NAT_HINT_SLOTS);
	__type(key, __u32);
	__type(value, struct lbnat_port_hint);
} nat_port_hint SEC(".maps");

/* When a backend last closed first on a claim, and for which client
 * connection, by the claim's hash (XLB_NAT_TW_SLOTS). A hint for the port
 * search (xlb_consts.h): the control plane never reads it. */
struct lbnat_tw {
	__u32 stamp; /* the clock >> XLB_NAT_TW_SHIFT; 0: never */
	__u32 owner; /* the client connection's port hash, high half, | 1 */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XLB_NAT_TW_SLOTS);
	__type(key, __u32);
	__type(value, struct lbnat_tw);
} nat_tw SEC(".maps");

/* What the NAT path did, by enum lbnat_stat. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LBNAT_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} nat_counters SEC(".maps");

/* What the control plane did to sessions from user space, by enum
 * lbnat_stat: ended (a backend failed its health checks); agents from
 * before xlb_nat_reap counted their sweep's expired and no-reply here
 * too. The program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LBNAT_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} nat_swept SEC(".maps");

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

/* Counters and next-hop cache per backend (struct backend_state). The
 * next-hop cache is the result of bpf_fib_lookup for a backend, per CPU,
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

/* Pass and drop counts by enum xlb_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XLB_REASON_MAX);
	__type(key, __u32);
	__type(value, __u64);
} reasons SEC(".maps");

#endif
