/* Sizes, ports and reasons shared by xlb's eBPF programs. Every limit is a
 * named constant that the control plane mirrors (internal/config). */
#ifndef XLB_CONSTS_H
#define XLB_CONSTS_H

#ifndef XLB_MAX_SERVICES
#define XLB_MAX_SERVICES 16384
#endif

/* One backend entry per (service, backend) pair. */
#ifndef XLB_MAX_BACKENDS
#define XLB_MAX_BACKENDS 16384
#endif

/* Default Maglev table size; the real size is a load-time parameter
 * (rodata table_size) and the inner maps are created with it. */
#ifndef XLB_DEFAULT_TABLE_SIZE
#define XLB_DEFAULT_TABLE_SIZE 65537
#endif

/* Service index: an open-addressing table of XLB_SVC_SLOTS slots (a power
 * of two) where a service sits at most XLB_SVC_PROBES slots after its home
 * slot. svc_hash spreads services like random keys, and random keys
 * overflow a short probe window often: with 1024 services in 4096 slots,
 * 1 configuration in 18 has a service that needs more than 8 probes
 * (simulated), 1 in 19000 more than 16, and replacing services one by one
 * (deleted slots linger as tombstones) failed once in 3 million. With 16
 * slots per service and 16 probes a union bound puts the risk of a
 * configuration of 1024 services below 2e-11 (of XLB_MAX_SERVICES, 16
 * times as many, below 4e-10), and 3 million replacements displaced no
 * service by more than 8 slots. The slots cost 4 MiB; a lookup, hit or
 * miss, almost always reads one slot, so the bound only sizes the
 * unrolled loop.
 * A change of the slot count changes the pinned maps' layout, so the agent
 * migrates to fresh maps (internal/dataplane/layout.go); a change of
 * svc_hash alone does not, and internal/dataplane then refuses a pinned
 * index whose services are not where the hash puts them. */
#ifndef XLB_SVC_SLOTS
#define XLB_SVC_SLOTS 262144
#endif
#define XLB_SVC_PROBES 16

/* VIP filter: a bitmap of 2^XLB_VIP_FILTER_BITS bits (64 per word) with
 * a bit set for every VIP's hash (vip_filter_bit). A packet that is no
 * service's and whose destination's bit is clear is no VIP's either, and
 * passes without a lookup in the vips hash map, which costs the miss path
 * more than everything else on it together. With XLB_MAX_SERVICES VIPs
 * 1.6% of other addresses still meet a set bit and take the lookup; with
 * 100 VIPs, 0.01%. */
#define XLB_VIP_FILTER_BITS 20
#define XLB_VIP_FILTER_WORDS (1 << (XLB_VIP_FILTER_BITS - 6))

/* Decapsulation: how many VIPs one backend host accepts. */
#ifndef XLB_MAX_VIPS
#define XLB_MAX_VIPS 1024
#endif

/* GUE destination port on backends. */
#ifndef XLB_GUE_PORT
#define XLB_GUE_PORT 6080
#endif

/* Fixed flow-hash seed: identical on every xlb instance so that any
 * instance ECMP hands a flow to picks the same table slot. */
#define XLB_HASH_SEED 0x786c6231u /* "xlb1" */
#define XLB_HASH_SEED64 0x786c6231deadbeefULL

/* The flow hash a program computes (load-time parameter flow_hash). */
#define XLB_FLOW_HASH_FMIX64 0
#define XLB_FLOW_HASH_LOOKUP3 1

#define XLB_OUTER_TTL 64

/* Longest life of a cached next hop, in jiffies: 0.1 s at HZ=1000, 1 s at
 * HZ=100. The upgrade test's variant build (internal/dataplane/gen.go)
 * changes it, for a program whose bytecode differs and whose maps do not. */
#ifdef XLB_UPGRADE_VARIANT
#define XLB_NH_MAX_AGE 50
#else
#define XLB_NH_MAX_AGE 100
#endif

#define XLB_ENCAP_IPIP 1
#define XLB_ENCAP_GUE 2

#define XLB_IPIP_OVERHEAD 20            /* outer IPv4 */
#define XLB_GUE_OVERHEAD (20 + 8 + 4)   /* outer IPv4 + UDP + GUE */

/* Every verdict that is not a forward is counted under one reason. The
 * names in internal/dataplane must follow this order. */
enum xlb_reason {
	XLB_PASS_NOT_IPV4 = 0,   /* ARP, IPv6, VLAN, ...: not ours */
	XLB_PASS_NOT_TCP_UDP,    /* ICMP and other protocols, not to a VIP */
	XLB_PASS_NO_SERVICE,     /* not addressed to a VIP */
	XLB_PASS_TTL_EXCEEDED,   /* TTL <= 1: the kernel sends time-exceeded */
	XLB_PASS_NO_NEIGH,       /* next hop MAC unknown: the kernel forwards and resolves it */
	XLB_DROP_MALFORMED_ETH,  /* frame shorter than an Ethernet header */
	XLB_DROP_MALFORMED_IP,   /* truncated header, IHL < 5, bad version or length */
	XLB_DROP_MALFORMED_L4,   /* L4 header shorter than the ports */
	XLB_DROP_FRAGMENT,       /* IP fragment addressed to a VIP */
	XLB_DROP_NO_BACKEND,     /* service without a usable table slot */
	XLB_DROP_NO_ROUTE,       /* no route to the backend */
	XLB_DROP_TOO_BIG,        /* exceeds egress MTU after encapsulation, DF clear */
	XLB_DROP_ENCAP_FAILED,   /* no headroom to add the outer headers */
	XLB_TX_ICMP_TOO_BIG,     /* answered with ICMP fragmentation-needed (DF set) */
	XLB_NOTE_IP_OPTIONS,     /* forwarded with its IP options intact (not a drop) */
	XLB_DROP_VIP_NO_SERVICE, /* to a VIP, but no service for its port or protocol */
	XLB_NOTE_ICMP_TO_BACKEND,/* ICMP error about a reply, forwarded to the flow's backend (not a drop) */
	XLB_NOTE_CT_NEW,         /* stateful service: a flow entry created (not a drop) */
	XLB_NOTE_CT_MIDFLOW_MISS,/* stateful: non-SYN TCP without an entry, evicted or begun elsewhere (not a drop) */
	XLB_REASON_MAX,
};

/* GUE with the daisy-chain hint (Beamer): 16 bytes of GUE private data
 * after the base header, struct xlb_gue_hint in xlb_encap.h. */
#define XLB_ENCAP_GUE_HINT 3
#define XLB_GUE_HINT_WORDS 4
#define XLB_GUE_HINT_OVERHEAD (XLB_GUE_OVERHEAD + 4 * XLB_GUE_HINT_WORDS)

/* struct svc_slot flags. STATEFUL: the service's flows keep the backend
 * their first packet got (conntrack), whatever the table says later. */
#define XLB_SVC_STATEFUL 1

/* Flows the conntrack LRU holds; the real size is a load-time option
 * (internal/dataplane Options.ConntrackSize). */
#ifndef XLB_CONNTRACK_SIZE
#define XLB_CONNTRACK_SIZE 262144
#endif

#endif
