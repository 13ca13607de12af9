/* Every layout that xlb's programs and its Go side share: map keys and
 * values, the Maglev table entry, the GUE hint on the wire, and the enums
 * whose values are map keys, load-time parameters or slot fields. Go has
 * no hand-written copy of any of it: xlb_wire.c names each type once for
 * bpf2go, which generates internal/dataplane/wire. Structs have no implicit
 * padding, so that Go writes them byte for byte. The maps themselves are
 * in xlb_maps.h (LB) and xlb_backend_maps.h (backend host).
 *
 * An address of either family is a union xlb_addr: IPv6, or IPv4 as an
 * IPv4-mapped IPv6 address, so that one key holds both families without
 * a family field and an LPM trie holds prefixes of both. The two layouts
 * the LB's fast path reads on every packet keep their compact IPv4 form
 * and mark IPv6 apart (struct svc_slot, xlb_table_entry): an IPv4 packet
 * reads what it read before. wire.AddrOf and Addr.IP convert. */
#ifndef XLB_STRUCTS_H
#define XLB_STRUCTS_H

#include <linux/types.h>
#include "xlb_consts.h"

/* ---- Both programs ---- */

/* An IPv4 or IPv6 address in network order: IPv6 as it is, IPv4 as
 * ::ffff:a.b.c.d (RFC 4291, 2.5.5.2), its address in w[3]. All zero:
 * none. bytes comes first so that Go sees the whole address. */
union xlb_addr {
	__u8 bytes[16];
	__be32 w[4];
};

/* A packets/bytes pair, per CPU in every counter map. */
struct xlb_counter {
	__u64 packets;
	__u64 bytes;
};

/* The daisy-chain hint, GUE private data after the base header
 * (XLB_ENCAP_GUE_HINT, hlen XLB_GUE_HINT_WORDS), every word big-endian:
 * the slot's previous owner and the one before it (0: none), when the
 * slot last changed hands and the service's table generation (unix
 * seconds, 0: never). The LB writes it, a backend host reads it and
 * rewrites it when it chains. docs/connection-survival.md has the
 * format. */
struct xlb_gue_hint {
	__be32 prev;
	__be32 prev2;
	__be32 changed;
	__be32 generation;
};

/* The same hint for a slot whose backend is IPv6, which travels in GUE
 * over IPv6 (hlen XLB_GUE_HINT6_WORDS): the previous owners are IPv6
 * addresses (all zero: none). GUE's hlen tells the two forms apart. */
struct xlb_gue_hint6 {
	union xlb_addr prev;
	union xlb_addr prev2;
	__be32 changed;
	__be32 generation;
};

/* ---- The LB program ---- */

/* Every verdict that is not a forward is counted under one reason (the
 * reasons map's key). wire.ReasonNames follows this order. */
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
	XLB_TX_PING_REPLY,       /* ICMP echo request to a VIP, answered by the node (ping_vips) */
	XLB_DROP_PING_REFUSED,   /* echo request to a VIP not answered (ping_vips): a fragment, IP
				  * options, or a source no reply may go to (broadcast, multicast, ...) */
	XLB_DROP_DENIED,         /* to a VIP from a source in the node's deny list */
	XLB_DROP_SOURCE_RANGE,   /* to a service from outside its source ranges (also per service: svc_src_drops) */
	XLB_DROP_NAT_NO_SESSION, /* NAT service: TCP other than a SYN, or an ICMP error, without a session */
	XLB_DROP_NAT_NO_PORT,    /* NAT service: no free port (or no room) for a new session */
	XLB_PASS_IPV6_EXT,       /* IPv6 not to a VIP with a fragment header or an extension header
				  * xlb does not skip: passed untouched */
	XLB_DROP_IPV6_EXT,       /* IPv6 to a VIP with an extension header xlb does not skip (a
				  * routing header with segments left, too many, ...); fragments
				  * to a VIP count under drop_fragment */
	XLB_TX_ARP_REPLY,        /* layer-2 mode: ARP request for a VIP this node owns, answered */
	XLB_PASS_ARP_EXPIRED,    /* layer-2 mode: ARP request or neighbour solicitation for a VIP
				  * whose ownership the agent stopped refreshing (hung or
				  * stopped): not answered */
	XLB_TX_ND_ADVERT,        /* layer-2 mode: neighbour solicitation for an IPv6 VIP this node
				  * owns, answered with an advertisement */
	XLB_REASON_MAX,
};

/* Layer-2 mode: a VIP this node answers ARP for (map l2_owned, keyed by
 * union xlb_addr), with the interface's MAC to answer with, until
 * expires (bpf_ktime_get_ns). The agent moves expires forward at every
 * heartbeat, so the node of a hung agent falls silent by itself and
 * never answers beside the VIP's next owner. */
struct l2_owner {
	__u64 expires;
	__u8 mac[6];
	__u8 pad[2];
};

/* The flow hash a program computes (load-time parameter flow_hash);
 * wire.FlowHash names them. */
enum xlb_flow_hash {
	XLB_FLOW_HASH_FMIX64 = 0,
	XLB_FLOW_HASH_LOOKUP3 = 1,
};

/* A service's encapsulation (struct svc_slot's encap). GUE_HINT is GUE
 * with the daisy-chain hint (struct xlb_gue_hint). NAT and DNAT are no
 * encapsulation: the node rewrites the packet to the backend's address
 * and port, with a session for the replies (xlb_lbnat.h); NAT rewrites
 * the source to the node's NAT address and a port it allocates, DNAT
 * keeps the client's. */
enum xlb_encap {
	XLB_ENCAP_IPIP = 1,
	XLB_ENCAP_GUE = 2,
	XLB_ENCAP_GUE_HINT = 3,
	XLB_ENCAP_NAT = 4,
	XLB_ENCAP_DNAT = 5,
};

/* struct svc_slot's flags. STATEFUL: the service's flows keep the backend
 * their first packet got (conntrack), whatever the table says later.
 * CLIENT_IP: client-IP affinity, the flow hash leaves out the client's
 * source port, so that every connection of a client takes the same table
 * slot. SOURCE_RANGES: only sources in the service's ranges (svc_ranges4)
 * reach it; the others are dropped before any table lookup. */
enum xlb_svc_flag {
	XLB_SVC_STATEFUL = 1,
	XLB_SVC_CLIENT_IP = 2,
	XLB_SVC_SOURCE_RANGES = 4,
};

/* Marks the protocol of an IPv6 service's slot (svc_slot.proto), so that
 * no IPv4 key ever equals an IPv6 one in the slot's first word. */
enum xlb_svc_proto_flag {
	XLB_SVC_PROTO_V6 = 0x80,
};

/* A service index slot. The first 8 bytes are the key (VIP, port,
 * protocol) plus the encapsulation: an IPv4 service's whole key, the
 * word the lookup compares. An IPv6 service has the first 4 bytes of its
 * VIP in vip, the other 12 in vip6, and XLB_SVC_PROTO_V6 in proto; its
 * lookup compares vip6 too (no usable IPv6 VIP starts with 4 zero
 * bytes). vip 0 marks a free slot: port 0 an empty one (ends a probe),
 * port 0xffff a deleted one (probing goes on). The control plane fills a
 * slot with vip 0 first and sets vip in a second write, so a packet never
 * sees a half-written service. */
struct svc_slot {
	__be32 vip;
	__be16 port;
	__u8 proto;
	__u8 encap;  /* enum xlb_encap */
	__u32 id;    /* index into maglev_tables, chain_tables and svc_retired */
	__u8 flags;  /* enum xlb_svc_flag */
	__u8 pad[3];
	__be32 vip6[3]; /* an IPv6 VIP's bytes 4..15; 0 for IPv4 */
	__u32 pad2;
};

/* The backend registry (id -> address and port): written and read by the
 * control plane, which copies addresses into the tables. Of the fast path
 * stateful services read it, to check that the backend a flow entry names
 * still exists and still counts for the service, and NAT services, for
 * the port a new session goes to (DSR services deliver to VIP:port and
 * ignore it). */
struct backend {
	union xlb_addr addr; /* 0: unused */
	__u32 owner; /* id + 1 of the service whose table names it; 0: none yet */
	__be16 port; /* what NAT services rewrite the destination port to */
	__u16 pad;
};

/* A Maglev table slot: the backend's id in the low 32 bits and its IPv4
 * address in the high 32 (as the program loads a __be32), so that the
 * fast path needs no backends lookup. Address 0: no backend, unless the
 * id carries XLB_TABLE_ENTRY_V6: an IPv6 backend, whose address is in
 * backends (id without the flag). The IPv4 path reads the entry as it
 * always did; only its "address 0" branch, rare, tells the two apart. */
typedef __u64 xlb_table_entry;

enum xlb_table_entry_flag {
	XLB_TABLE_ENTRY_V6 = 0x80000000u,
};

static inline __u32 xlb_table_entry_bid(xlb_table_entry e)
{
	return (__u32)e;
}

static inline __be32 xlb_table_entry_addr(xlb_table_entry e)
{
	return (__be32)(e >> 32);
}

/* Whether an entry whose address is 0 names an IPv6 backend. */
static inline int xlb_table_entry_v6(xlb_table_entry e)
{
	return ((__u32)e & XLB_TABLE_ENTRY_V6) != 0;
}

/* A slot of a daisy-chained service's chain table: the slot's backend,
 * as its Maglev table entry has it (with its address of either family),
 * with the hint's owners and time. */
struct chain_entry {
	__u32 bid;            /* backend id, as in maglev_tables */
	__u32 changed;        /* unix seconds, host order; 0: never */
	union xlb_addr addr;  /* the backend's address; 0: no backend (drop) */
	union xlb_addr prev;  /* previous owner; 0: none */
	union xlb_addr prev2; /* the owner before prev; 0: none */
};

/* Flow state of stateful services: a flow as the hash sees it, and the
 * backend it got. */
struct ct_key {
	union xlb_addr saddr;
	union xlb_addr daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct ct_entry {
	__u32 bid;
	union xlb_addr addr;
};

/* A backend's cached next hop, per CPU (xlb_maps.h, backend_stats): the
 * FIB's answer for either family, which holds no address. */
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

/* ---- The LB program's policy: the node's deny list and the services'
 * source ranges (xlb_policy.h). Each family has structures of its own
 * (deny4 and deny6, svc_ranges4 and svc_ranges6), as their addresses
 * need other strides. ---- */

/* The IPv4 deny table: one array of 32-byte cells, built whole in Go
 * (internal/dataplane/prefixset) and swapped in whole, in three levels
 * (a DIR-18-6-8 trie, leaf-pushed, its second level compressed by
 * popcount as poptrie does):
 *  - root: cells 0..XLB_DENY_ROOT_CELLS-1 hold one 32-bit entry per /18,
 *    entry r (the address's top 18 bits) in cell r / 8, word r % 8:
 *    0 no prefix covers any of it, XLB_DENY_ALL all of it is denied,
 *    anything else the index of the /18's node cell;
 *  - node (a /18's 64 /24s): q[0] bit i: /24 i is denied whole; q[1] bit
 *    i: /24 i has a leaf, which is cell w[4] + the number of bits of q[1]
 *    below i;
 *  - leaf (a /24): bit b of the 256-bit map (w[b / 32], bit b % 32): the
 *    address ending in b is denied.
 * Every lookup reads at most three cells, whatever the list holds. */
union xlb_deny_cell {
	__u32 w[8];
	__u64 q[4];
};

/* The deny table's geometry, and the root entry that denies a whole /18. */
enum xlb_deny_layout {
	XLB_DENY_ROOT_BITS = 18, /* the root has an entry per /18 */
	XLB_DENY_NODE_BITS = 6,  /* a node has a bit per /24 of its /18 */
	XLB_DENY_ALL = 0xffffffffu,
};

/* A node of the IPv6 deny table: one array of them, built whole in Go
 * (internal/dataplane/prefixset) and swapped in whole, a trie of stride
 * 8 (a byte of the address per level, root at index 0), leaf-pushed, its
 * children compressed by popcount and its paths by skipping: a node that
 * would deny nothing and have a single child is left out, its child
 * taking its place. A node indexes byte depth of the address; the bytes
 * before must be its prefix (pre_hi, pre_lo: the address's high and low
 * 64 bits, host order, bytes from depth on zero), else the address is
 * allowed. For byte b, word b / 64, bit b % 64:
 *  - deny: every address that reaches here with byte b is denied;
 *  - kids: byte b leads to a child node, whose index is first + before[b
 *    / 64] + the number of kids bits below b in its word.
 * Neither bit: allowed. A lookup reads at most 16 nodes (depth grows by
 * one or more from node to node), whatever the list holds; as many as
 * the prefixes around the address branch, with paths compressed. */
struct xlb_deny6_node {
	__u64 deny[4];
	__u64 kids[4];
	__u64 pre_hi;
	__u64 pre_lo;
	__u32 first;
	__u16 before[4]; /* kids bits in the words before word j */
	__u8 depth;
	__u8 pad[3];
};

/* A service's IPv4 source ranges: disjoint inclusive intervals [lo, hi]
 * of host-order addresses, sorted, the last one repeated up to
 * XLB_SVC_MAX_RANGES, so that a binary search of fixed depth finds the
 * one an address may be in. */
struct xlb_ranges4 {
	__u32 lo[XLB_SVC_MAX_RANGES];
	__u32 hi[XLB_SVC_MAX_RANGES];
};

/* A service's IPv6 source ranges, as struct xlb_ranges4 holds IPv4
 * ones: intervals [lo, hi] of addresses as 128-bit numbers, each as its
 * high and low 64 bits in host order. */
struct xlb_ranges6 {
	__u64 lo_hi[XLB_SVC_MAX_RANGES];
	__u64 lo_lo[XLB_SVC_MAX_RANGES];
	__u64 hi_hi[XLB_SVC_MAX_RANGES];
	__u64 hi_lo[XLB_SVC_MAX_RANGES];
};

/* ---- The LB program's NAT sessions (xlb_lbnat.h) ---- */

/* A packet's 5-tuple as it arrives, the key of a session in either
 * direction: client -> VIP:port in the forward tables (nat_fwd,
 * nat_fwd_syn), backend -> NAT address:allocated port (or -> client, for
 * dnat) in the reverse ones (nat_rev, nat_rev_syn), where it is also the
 * port's claim: no two sessions ever hold the same reverse key. An
 * embryonic forward entry's value is its session's reverse key, an
 * established one's a struct lbnat_fwd. */
struct lbnat_key {
	union xlb_addr src;
	union xlb_addr dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* A session's state; its timeout follows it (struct lbnat_cfg). */
enum lbnat_state {
	LBNAT_SYN = 1,         /* TCP: not established since the SYN (answered or not: LBNAT_REPLIED) */
	LBNAT_ESTABLISHED = 2, /* TCP: the client acknowledged the backend's answer */
	LBNAT_CLOSING = 3,     /* TCP: a FIN or an RST went by, either way */
	LBNAT_UDP = 4,         /* UDP, whether answered or not */
};

/* struct lbnat_session's flags. */
enum lbnat_flag {
	LBNAT_REPLIED = 1, /* the backend answered since the session (re)opened */
	LBNAT_DNAT = 2,    /* the client's address is kept (XLB_ENCAP_DNAT) */
};

/* A session, the value of a reverse key: what a reply is rewritten to
 * (VIP:port -> client), the backend it goes to and its state. The next
 * hop towards the client is cached in it, as replies of one session all
 * go there; the CPUs share it (a refill by one and a read by another of
 * the same next hop race only when the next hop changed). */
struct lbnat_session {
	union xlb_addr client;
	union xlb_addr vip;
	__be16 client_port;
	__be16 vip_port;
	__u32 backend_id;  /* the backend id the session began with (counters) */
	__u64 last;        /* bpf_ktime_get_coarse_ns of the last packet, either way */
	__u8 state;        /* enum lbnat_state */
	__u8 flags;        /* enum lbnat_flag */
	__u8 pad[6];
	struct nh_entry nh; /* the next hop towards the client */
};

/* An established session's forward entry (nat_fwd's value): its reverse
 * key, and what the client's packets need of the session, so that one of
 * them reads one entry: the backend, the state, and a timestamp of its
 * own. The session (nat_rev) keeps the other: the later of the two is
 * the session's last packet, and a state that closes is written to both
 * (xlb_lbnat.h). */
struct lbnat_fwd {
	struct lbnat_key rk;
	__u64 last;       /* bpf_ktime_get_coarse_ns of the client's last packet seen here */
	__u32 backend_id; /* the session's */
	__u8 state;       /* enum lbnat_state, as the session's */
	__u8 pad[3];
};

/* The node-wide NAT settings (nat_cfg, one entry), written whole by the
 * control plane. Timeouts in nanoseconds. */
struct lbnat_cfg {
	union xlb_addr addr; /* the source of full-NAT sessions; 0: none can begin */
	__u16 port_min;      /* the ports allocated on addr, host order, inclusive */
	__u16 port_max;
	__u32 flags;         /* enum lbnat_cfg_flag */
	__u64 tcp_syn_ns;
	__u64 tcp_established_ns;
	__u64 tcp_closing_ns;
	__u64 udp_ns;
	__u64 tcp_time_wait_ns; /* how long a backend that closed first keeps TIME_WAIT; 0: not known */
};

/* lbnat_cfg's flags. DNAT: replies of dnat sessions may pass, addressed
 * to their clients: packets whose source is in nat_dnat_be are looked up. */
enum lbnat_cfg_flag {
	LBNAT_CFG_DNAT = 1,
};

/* nat_dnat_be key: a dnat backend's address, port and protocol, whose
 * packets the reverse path looks up (sessions' backends). */
struct lbnat_be_key {
	union xlb_addr addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* What the NAT path did (nat_counters' key; nat_swept holds what the
 * control plane's sweep did, under the same keys). wire.LBNATStatNames
 * follows this order. */
enum lbnat_stat {
	LBNAT_CREATED = 0,     /* sessions created */
	LBNAT_ALLOC_FAILED,    /* no free port, or no room, for a new session */
	LBNAT_EXPIRED,         /* sessions found past their timeout, and removed */
	LBNAT_NO_REPLY,        /* of those, sessions the backend never answered */
	LBNAT_REV_MISS,        /* packets from a backend-looking tuple without a session: passed */
	LBNAT_FRAGMENT,        /* fragments to a NAT service (first fragments: ports known): dropped */
	LBNAT_ICMP,            /* ICMP errors about a session translated, either way */
	LBNAT_PROMOTED,        /* sessions moved to the established tables by the client's packet after the backend's reply */
	LBNAT_PROMOTE_FAILED,  /* the established tables full: the session stays embryonic */
	LBNAT_FWD,             /* packets translated client -> backend */
	LBNAT_REV,             /* packets translated backend -> client */
	LBNAT_ENDED,           /* sessions ended by the control plane (a backend failed its health check) */
	LBNAT_RECLAIMED,       /* embryonic sessions whose port a new session took, idle for XLB_NAT_SYN_STALE_NS */
	LBNAT_ALLOC_FAST_FAIL, /* of the allocation failures, those that tried XLB_NAT_FAST_TRIES ports only: the range known full */
	LBNAT_STAT_MAX,
};

/* ---- The backend-host program ---- */

/* Decapsulation outcomes, for both modes (decap_stats' key); nat_stats
 * counts what the Kubernetes mode did with the inner packet.
 * wire.DecapStatNames follows this order. */
enum decap_stat {
	DECAP_IPIP = 0,   /* IPIP decapsulated */
	DECAP_GUE,        /* GUE decapsulated */
	DECAP_PASS,       /* not a tunnel to this host or a local pod, or an outer frame the
			   * stack judges (not IPv4, header truncated, IHL < 5, options,
			   * fragment): passed untouched */
	DECAP_DROP_INNER, /* tunnel to this host whose payload is malformed (outer length
			   * beyond the frame, inner header truncated or not IPv4, inner
			   * length beyond the outer datagram) or not for a local VIP */
	DECAP_DROP_GUE,   /* GUE we cannot parse (version, control, inner protocol) */
	DECAP_STAT_MAX,
};

/* What the hint decided for a TCP packet (chain_stats' key).
 * wire.ChainStatNames follows this order. Delivered packets also count
 * under decap_gue; chained and dropped ones only here. */
enum chain_stat {
	CHAIN_SYN = 0,      /* delivered: a SYN opens a connection here */
	CHAIN_SOCKET,       /* delivered: a local socket holds the connection */
	CHAIN_SYNCOOKIE,    /* delivered: an ACK with a valid SYN cookie */
	CHAIN_CHAINED,      /* forwarded to the slot's previous owner */
	CHAIN_STALE_DROP,   /* dropped: sent by an LB instance with an older table */
	CHAIN_NO_SOCKET,    /* delivered without a socket: the stack answers (a reset) */
	CHAIN_NO_ROUTE,     /* dropped: no route to the previous owner */
	CHAIN_NO_NEIGHBOUR, /* chained through the stack: the next hop was not resolved yet */
	CHAIN_DROP_UNTRUSTED_SOURCE, /* dropped: would be chained, but its outer source is
				      * neither in chain_from nor in chain_to */
	CHAIN_DROP_UNKNOWN_OWNER,    /* dropped: would be chained to a previous owner not in
				      * chain_to */
	CHAIN_STAT_MAX,
};

/* BPF has no wall clock: `xlb backend` writes the offset of
 * CLOCK_REALTIME from CLOCK_BOOTTIME. A zero offset or window turns
 * chaining off (no hint is ever fresh); `xlb backend` writes a zero
 * window unless both sets (chain_from, chain_to) are configured. */
struct chain_cfg {
	__u64 wall_offset_ns;
	__u32 window_s; /* how long after a slot's change its hint is followed */
	__u32 flags;    /* enum chain_cfg_flag */
};

/* The sets are configured: only a hint from a known source may raise a
 * service's newest generation (chain_newest_gen). Without them every
 * hint may, as chaining is off and the stale-instance drop is all the
 * hints still do. */
enum chain_cfg_flag {
	CHAIN_CFG_SETS = 1,
};

/* A prefix of chain_from or chain_to (LPM trie keys): prefixlen counts
 * over the 128 bits of addr, so an IPv4 /n is 96 + n. */
struct chain_peer_key {
	__u32 prefixlen;
	union xlb_addr addr;
};

/* A service as chain_gens remembers its newest generation. */
struct chain_svc_key {
	union xlb_addr vip;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* What the Kubernetes mode did (nat_stats' key). wire.NATStatNames
 * follows this order. */
enum nat_stat {
	NAT_FWD = 0,            /* VIP:port -> pod:targetPort, decapsulated and passed */
	NAT_FWD_ICMP,           /* ICMP error about a reply, translated for the pod */
	NAT_REV_FLOW,           /* reply pod:targetPort -> VIP:port, by its flow record */
	NAT_REV_FALLBACK,       /* reply translated by the (pod, target port) fallback */
	NAT_REV_ICMP,           /* ICMP error about a translated flow, translated for the client */
	NAT_REV_UNTRACKED,      /* TCP/UDP from a pod (or an ICMP error about it), no flow: passed untouched */
	NAT_REV_FRAGMENT,       /* fragment from a pod: no ports to look up, passed untouched */
	NAT_REV_DROP_WRITE,     /* a reply's rewrite failed halfway: dropped */
	NAT_DROP_NO_ENTRY,      /* tunnelled to a local pod, no translation for the inner VIP:port */
	NAT_DROP_FRAGMENT,      /* inner fragment: no ports to translate */
	NAT_DROP_MALFORMED,     /* inner packet truncated or inconsistent */
	NAT_DROP_PROTO,         /* inner neither TCP, UDP nor an ICMP error about a reply */
	NAT_NOTE_FLOW_FAILED,   /* flow record not written; the packet was still translated */
	NAT_STAT_MAX,
};

/* nat_svcs key: a packet tunnelled to `pod` for vip:port/proto. */
struct nat_svc_key {
	union xlb_addr vip;
	union xlb_addr pod;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* nat_flows key: a reply as the pod sends it, pod:target_port -> client. */
struct nat_flow_key {
	union xlb_addr pod;
	union xlb_addr client;
	__be16 pod_port;
	__be16 client_port;
	__u8 proto;
	__u8 pad[3];
};

/* What a reply's source becomes. */
struct nat_vip {
	union xlb_addr vip;
	__be16 port;
	__u16 pad;
};

/* nat_rev_ports key: the fallback for replies without a flow record. */
struct nat_rev_key {
	union xlb_addr pod;
	__be16 pod_port;
	__u8 proto;
	__u8 pad;
};

/* The sizes the other side relies on: Go writes these byte for byte, and
 * the wire formats are fixed. internal/dataplane/wire checks its
 * generated types against the same numbers. */
_Static_assert(sizeof(union xlb_addr) == 16, "xlb_addr");
_Static_assert(sizeof(struct xlb_counter) == 16, "xlb_counter");
_Static_assert(sizeof(struct xlb_gue_hint) == 16, "the GUE hint is 4 words on the wire");
_Static_assert(sizeof(struct xlb_gue_hint6) == 40, "the IPv6 GUE hint is 10 words on the wire");
_Static_assert(sizeof(struct svc_slot) == 32, "svc_slot");
_Static_assert(__builtin_offsetof(struct svc_slot, id) == 8,
	       "svc_lookup compares the first 8 bytes of a slot as its key");
_Static_assert(sizeof(struct backend) == 24, "backend");
_Static_assert(sizeof(xlb_table_entry) == 8, "table entry");
_Static_assert(sizeof(struct chain_entry) == 56, "chain_entry");
_Static_assert(sizeof(struct ct_key) == 40 && sizeof(struct ct_entry) == 20, "conntrack");
_Static_assert(sizeof(struct nh_entry) == 32 && sizeof(struct backend_state) == 48, "backend_state");
_Static_assert(sizeof(struct chain_cfg) == 16, "chain_cfg");
_Static_assert(sizeof(struct lbnat_key) == 40 && sizeof(struct lbnat_session) == 88 &&
		       sizeof(struct lbnat_fwd) == 56 &&
		       sizeof(struct lbnat_cfg) == 64 && sizeof(struct lbnat_be_key) == 20,
	       "NAT sessions");
_Static_assert(sizeof(union xlb_deny_cell) == 32, "deny cell");
_Static_assert(sizeof(struct xlb_ranges4) == 8 * XLB_SVC_MAX_RANGES, "ranges");
_Static_assert(sizeof(struct xlb_ranges6) == 32 * XLB_SVC_MAX_RANGES, "ranges6");
_Static_assert(sizeof(struct chain_peer_key) == 20, "an LPM key: prefix length, then the address");
_Static_assert(sizeof(struct chain_svc_key) == 20, "chain_svc_key");
_Static_assert(sizeof(struct nat_svc_key) == 36 && sizeof(struct nat_flow_key) == 40 &&
		       sizeof(struct nat_vip) == 20 && sizeof(struct nat_rev_key) == 20,
	       "NAT keys and values");

#endif
