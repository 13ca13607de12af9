/* Sizes, ports and other constants of xlb's eBPF programs. Every limit is
 * a named constant that the control plane mirrors (internal/config,
 * internal/dataplane). Layouts and enums are in xlb_structs.h. */
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
 * slot. 16 slots per service keep the risk that a configuration needs a
 * longer probe negligible (docs/decisions/0001-lb-fast-path.md); a lookup
 * almost always reads one slot, so the bound only sizes the unrolled loop.
 * A change of the slot count changes the pinned maps' layout, so the agent
 * migrates to fresh maps (internal/dataplane/bpfobj/layout.go); a change of
 * svc_hash alone does not, and internal/dataplane/lb then refuses a pinned
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

/* Policy (xlb_policy.h). A service's source ranges: at most this many
 * (after merging overlaps), a power of two: the binary search over them
 * takes log2 of it steps, whatever the service has. */
#define XLB_SVC_MAX_RANGES 64

/* The node's deny list: at most this many prefixes. Its table holds at
 * most one node cell and one leaf cell per prefix beside its root
 * (XLB_DENY_CELLS in xlb_policy.h). */
#ifndef XLB_DENY_MAX_PREFIXES
#define XLB_DENY_MAX_PREFIXES 131072
#endif

/* The node's IPv6 deny table: at most this many nodes (struct
 * xlb_deny6_node, 96 bytes each). With its paths compressed, a list of n
 * prefixes takes at most 2n nodes (every node but the root denies
 * something or branches): any 65536 prefixes fit, most lists far more. */
#ifndef XLB_DENY6_NODES
#define XLB_DENY6_NODES 131072
#endif

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

#define XLB_OUTER_TTL 64

/* Longest life of a cached next hop, in jiffies: 0.1 s at HZ=1000, 1 s at
 * HZ=100. The upgrade test's variant build (internal/dataplane/lb/gen.go)
 * changes it, for a program whose bytecode differs and whose maps do not. */
#ifdef XLB_UPGRADE_VARIANT
#define XLB_NH_MAX_AGE 50
#else
#define XLB_NH_MAX_AGE 100
#endif

#define XLB_IPIP_OVERHEAD 20            /* outer IPv4 */
#define XLB_GUE_OVERHEAD (20 + 8 + 4)   /* outer IPv4 + UDP + GUE */

/* An IPv6 outer header is 20 bytes longer than an IPv4 one. */
#define XLB_OUTER6_EXTRA 20

/* IPv6 extension headers the LB skips before the ports (hop-by-hop,
 * destination options, routing with no segments left): at most this
 * many; a packet with more is passed (XLB_PASS_IPV6_EXT). */
#define XLB_IPV6_EXT_MAX 4

/* Bytes of the offending packet an ICMPv6 Packet Too Big quotes at
 * most: as much as fits in the IPv6 minimum MTU, 1280, after the
 * error's own IPv6 and ICMPv6 headers (RFC 4443 2.4 (c), 3.2). */
#define XLB_ICMP6_QUOTE (1280 - 40 - 8)

/* GUE with the daisy-chain hint (Beamer): 16 bytes of GUE private data
 * after the base header, struct xlb_gue_hint in xlb_structs.h. */
#define XLB_GUE_HINT_WORDS 4
#define XLB_GUE_HINT_OVERHEAD (XLB_GUE_OVERHEAD + 4 * XLB_GUE_HINT_WORDS)

/* The hint with IPv6 owners (struct xlb_gue_hint6), for IPv6 backends:
 * 40 bytes, XLB_GUE_HINT6_EXTRA more than the IPv4 form. */
#define XLB_GUE_HINT6_WORDS 10
#define XLB_GUE_HINT6_EXTRA (4 * (XLB_GUE_HINT6_WORDS - XLB_GUE_HINT_WORDS))

/* Flows the conntrack LRU holds; the real size is a load-time option
 * (internal/dataplane/lb Options.ConntrackSize). */
#ifndef XLB_CONNTRACK_SIZE
#define XLB_CONNTRACK_SIZE 262144
#endif

/* NAT sessions (xlb_lbnat.h). The established tables hold
 * XLB_NAT_SESSIONS sessions, the embryonic ones (no reply from the
 * backend yet) XLB_NAT_EMBRYONIC; both are load-time sizes
 * (internal/dataplane/lb Options.NATSessions, the embryonic ones an
 * eighth of it). docs/decisions/0007-nat-sessions.md has the figures. */
#ifndef XLB_NAT_SESSIONS
#define XLB_NAT_SESSIONS 262144
#endif
#ifndef XLB_NAT_EMBRYONIC
#define XLB_NAT_EMBRYONIC (XLB_NAT_SESSIONS / 8)
#endif

/* Ports a new full-NAT session tries, each drawn from the flow's hash
 * over the configured range, before it gives up: at a fill f of one
 * backend's ports, a session fails with probability about f^TRIES. */
#define XLB_NAT_PORT_TRIES 64

/* A backend's range known full (xlb_lbnat.h, nat_port_hint): after
 * XLB_NAT_HINT_FAILS searches of XLB_NAT_PORT_TRIES in a row failed on a
 * CPU, its new sessions there try XLB_NAT_FAST_TRIES ports only, until
 * one finds a port or XLB_NAT_HINT_NS (100 ms) passed since the last full
 * search failed: a SYN flood that filled the range costs a few lookups a
 * SYN, not a hundred. XLB_NAT_HINT_SLOTS hint slots per CPU, by backend
 * ID. */
#define XLB_NAT_FAST_TRIES 4
#define XLB_NAT_HINT_FAILS 2
#define XLB_NAT_HINT_NS 100000000ULL
#define XLB_NAT_HINT_SLOTS 1024

/* A backend that sent the first FIN keeps the connection in TIME_WAIT
 * (60 s on Linux) after the node forgot the session (tcpClosing); a new
 * session that drew the same port to it would meet that socket, which
 * refuses a SYN whose TCP timestamp is older (another client's clock) and
 * makes the client retransmit a second later. So a full search first
 * tries its first XLB_NAT_TW_TRIES candidates skipping any port whose
 * claim a backend closed on another client connection (address and
 * port) less than tcpTimeWait ago, and then, if none
 * was free, all XLB_NAT_PORT_TRIES as before, taking any free port: a
 * busy range loses no capacity. nat_tw has
 * XLB_NAT_TW_SLOTS slots, a claim's by its hash: a slot shared by two
 * claims holds the later close, which only makes a port look busy. */
#define XLB_NAT_TW_TRIES 32
#define XLB_NAT_TW_SLOTS 262144
#define XLB_NAT_TW_SHIFT 20 /* nat_tw's clock: about a millisecond a tick */

/* A session's timestamp is rewritten only once it is this much older
 * than the packet (about 67 ms), so that the packets of a busy session
 * do not all write the shared cache line. */
#define XLB_NAT_TOUCH_NS (1ULL << 26)

/* An embryonic session idle this long (1 s), answered or not, gives its
 * port up to a new session that draws it: a backend answers within a
 * round trip and a client acknowledges within another, and a SYN flood,
 * answered by the backend or not, would otherwise hold a backend's whole
 * port range for the SYN timeout. */
#define XLB_NAT_SYN_STALE_NS 1000000000ULL

/* Seed of the hash that draws a session's candidate ports. */
#define XLB_NAT_PORT_SEED 0x6c626e6174706f72ULL /* "lbnatpor" */

/* dnat backends (address, port, protocol) whose packets the reverse path
 * looks up. */
#ifndef XLB_NAT_DNAT_BACKENDS
#define XLB_NAT_DNAT_BACKENDS 16384
#endif

/* ---- The backend-host program ---- */

/* Daisy chaining: services (VIP, port) whose newest table generation is
 * remembered (chain_gens), and the sizes of the sets of xlb nodes
 * (chain_from) and previous owners (chain_to) that may chain. */
#ifndef XLB_CHAIN_MAX_SERVICES
#define XLB_CHAIN_MAX_SERVICES 8192
#endif
#ifndef XLB_CHAIN_MAX_NODES
#define XLB_CHAIN_MAX_NODES 16384
#endif
#ifndef XLB_CHAIN_MAX_OWNERS
#define XLB_CHAIN_MAX_OWNERS 65536
#endif

/* Kubernetes translation: pods on this node that are the target of at
 * least one translation. */
#ifndef XLB_NAT_MAX_PODS
#define XLB_NAT_MAX_PODS 4096
#endif

/* (VIP, port, protocol, pod) entries: services times local endpoints. */
#ifndef XLB_NAT_MAX_ENTRIES
#define XLB_NAT_MAX_ENTRIES 16384
#endif

/* Translated flows remembered for their replies. An LRU map: a flow's
 * record is refreshed by every packet in either direction, so only idle
 * flows age out, and the next client packet records a flow again. About
 * 72 bytes each: 4.5 MiB. */
#ifndef XLB_NAT_MAX_FLOWS
#define XLB_NAT_MAX_FLOWS 65536
#endif

#endif
