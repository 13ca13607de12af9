// SPDX-License-Identifier: GPL-2.0
/* xlb backend programs, on a backend host's interface.
 *
 * XDP (xlb_decap) strips the IPIP or GUE header that an xlb node added.
 * Tunnelled to this host, the inner packet's destination is a VIP
 * configured on this host (on lo), and the stack takes it as it is.
 * Tunnelled to a local pod (Kubernetes mode, xlb_nat.h), the inner
 * destination VIP:port becomes the pod's address and target port first.
 * A TCP packet to a VIP whose GUE header carries a daisy-chain hint and
 * that no local socket takes may go on to the previous owner instead,
 * when it comes from a known xlb node and names a known previous owner.
 * TC egress (xlb_nat_reply) turns the pods' replies back into VIP:port.
 * Everything else passes untouched. */
#include "xlb_helpers.h"
#include "xlb_nat.h"

/* Outer destinations that are this host (written by `xlb backend`). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __be32);
	__type(value, __u8);
} host_addrs SEC(".maps");

/* VIPs configured locally: an inner packet for anything else is dropped,
 * so the host never becomes an open relay for spoofed inner packets. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_MAX_VIPS);
	__type(key, __be32);
	__type(value, __u8);
} decap_vips SEC(".maps");

/* Decapsulation outcomes, for both modes; nat_stats counts what the
 * Kubernetes mode did with the inner packet. */
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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DECAP_STAT_MAX);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} decap_stats SEC(".maps");

static __always_inline int verdict(__u32 stat, __u64 bytes, int v)
{
	struct xlb_counter *c = bpf_map_lookup_elem(&decap_stats, &stat);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
	return v;
}

/* A tunnel to this host or a local pod that is not what an xlb node
 * sends: dropped, and counted where its mode counts malformed packets. */
static __always_inline int drop_malformed(int to_pod)
{
	if (to_pod) {
		nat_count(NAT_DROP_MALFORMED, 0);
		return XDP_DROP;
	}
	return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
}

/* Move the Ethernet header forward over the outer headers, then advance
 * the packet start to it. Returns 0 or -1. */
static __always_inline int strip_outer(struct xdp_md *ctx, struct ethhdr *eth, __u32 strip,
				       void *data_end)
{
	struct ethhdr *neth = (void *)eth + strip;

	if ((void *)(neth + 1) > data_end)
		return -1;
	__builtin_memmove(neth, eth, sizeof(*eth));
	return bpf_xdp_adjust_head(ctx, (int)strip) ? -1 : 0;
}

/* Daisy chaining (Beamer, NSDI'18): when a table slot moves to this host,
 * connections its previous owner still holds keep arriving here until
 * every LB instance has the new table and the flows end. An xlb node
 * adds a hint to GUE (variant 0, hlen 4): the slot's previous owner and
 * the one before it, when the slot changed hands and the generation of
 * the service's table. A TCP packet this host holds no connection for
 * goes on to the previous owner for a while after the change, and from
 * there, if that one has none either, to the owner before; one from an LB instance with an older
 * table than some other instance already sent is dropped, so that the
 * client retransmits after the stale instance caught up instead of
 * getting a reset. docs/operations.md (Backend hosts) has the details.
 * A hint is not trusted as it comes: a packet is chained only when its
 * outer source is a known xlb node or backend (chain_from, chain_to) and
 * only to a previous owner in chain_to, so a forged hint cannot make this
 * host send a packet to an address of the sender's choice. Anything else
 * that would have been chained is dropped and counted. */

/* GUE header length, in 4-byte words, of a packet carrying the hint. */
#define GUE_HINT_HLEN 4

/* Services (VIP, port) whose newest table generation is remembered. */
#ifndef XLB_CHAIN_MAX_SERVICES
#define XLB_CHAIN_MAX_SERVICES 8192
#endif

/* The GUE private data of the hint, big-endian. */
struct gue_hint {
	__be32 prev;       /* the slot's previous owner; 0: none */
	__be32 prev2;      /* the owner before prev; 0: none */
	__be32 changed;    /* unix seconds when the slot's owner last changed */
	__be32 generation; /* unix seconds of the service's newest backend-set change; 0: unknown */
};

/* BPF has no wall clock: `xlb backend` writes the offset of
 * CLOCK_REALTIME from CLOCK_BOOTTIME. A zero offset or window turns
 * chaining off (no hint is ever fresh); `xlb backend` writes a zero
 * window unless both sets below are configured. */
struct chain_cfg {
	__u64 wall_offset_ns;
	__u32 window_s; /* how long after a slot's change its hint is followed */
	__u32 flags;    /* CHAIN_CFG_* */
};

/* The sets are configured: only a hint from a known source may raise a
 * service's newest generation (chain_newest_gen). Without them every
 * hint may, as chaining is off and the stale-instance drop is all the
 * hints still do. */
#define CHAIN_CFG_SETS 1

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain_cfg);
} chain_cfg SEC(".maps");

/* Who may have a packet chained, and to whom: IPv4 prefixes, written by
 * `xlb backend` (--chain-from, --chain-to, or the cluster). chain_from
 * holds the xlb nodes; chain_to the backends that may be a slot's
 * previous owner, which are sources too, as a backend that chains a
 * packet sends it on from its own address. Lookups cost the same
 * whatever the sets hold. */
struct chain_peer_key {
	__u32 prefixlen;
	__be32 addr;
};

#ifndef XLB_CHAIN_MAX_NODES
#define XLB_CHAIN_MAX_NODES 16384
#endif
#ifndef XLB_CHAIN_MAX_OWNERS
#define XLB_CHAIN_MAX_OWNERS 65536
#endif

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, XLB_CHAIN_MAX_NODES);
	__type(key, struct chain_peer_key);
	__type(value, __u8);
} chain_from SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, XLB_CHAIN_MAX_OWNERS);
	__type(key, struct chain_peer_key);
	__type(value, __u8);
} chain_to SEC(".maps");

struct chain_svc_key {
	__be32 vip;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* The newest table generation seen per service. A full map only loses
 * the stale-instance drop for the services that did not fit: their
 * packets are delivered as without a hint. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_CHAIN_MAX_SERVICES);
	__type(key, struct chain_svc_key);
	__type(value, __u32);
} chain_gens SEC(".maps");

/* What the hint decided for a TCP packet. The names in internal/dataplane
 * (ChainStatNames) follow this order. Delivered packets also count under
 * decap_gue; chained and dropped ones only here. */
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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CHAIN_STAT_MAX);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} chain_stats SEC(".maps");

/* The TCP header as far as the decision reads it. */
struct chain_tcphdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res;
	__u8 flags;
	__be16 window;
	__sum16 check;
	__be16 urg_ptr;
};

#define TCP_FLAG_RST 0x04
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10

#define AF_INET 2
#define NSEC_PER_SEC 1000000000ULL

/* The hint's decision when the packet is for the stack. */
#define CHAIN_DELIVER -1

static __always_inline void chain_count(__u32 stat, __u64 bytes)
{
	struct xlb_counter *c = bpf_map_lookup_elem(&chain_stats, &stat);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline int chain_known(void *set, __be32 addr)
{
	struct chain_peer_key k = {.prefixlen = 32, .addr = addr};

	return bpf_map_lookup_elem(set, &k) != 0;
}

/* Whether a packet from src may be chained: sent by a known xlb node, or
 * by a known backend that chained it here. */
static __always_inline int chain_trusted(__be32 src)
{
	return chain_known(&chain_from, src) || chain_known(&chain_to, src);
}

static __always_inline struct chain_cfg *chain_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&chain_cfg, &zero);
}

/* Remember gen if it is the newest of its service, and return the newest.
 * Only a hint from a known source may raise it (when the sets are
 * configured): a forged generation from the future would turn every
 * packet without a socket into a silent drop. The source is looked up
 * only then, so hints of the current generation cost no lookup. Two CPUs
 * may race and keep the lower of two new generations: that only delays
 * the stale-instance drop until the next packet of the newer one. */
static __always_inline __u32 chain_newest_gen(struct chain_cfg *cfg, __be32 src, __be32 vip,
					      __be16 port, __u32 gen)
{
	struct chain_svc_key k = {.vip = vip, .port = port, .proto = IPPROTO_TCP};
	__u32 *seen = bpf_map_lookup_elem(&chain_gens, &k);

	if (seen && gen <= *seen)
		return *seen;
	if (cfg && (cfg->flags & CHAIN_CFG_SETS) && !chain_trusted(src))
		return seen ? *seen : 0;
	if (!seen) {
		bpf_map_update_elem(&chain_gens, &k, &gen, BPF_NOEXIST);
		return gen;
	}
	*seen = gen;
	return gen;
}

/* Whether a slot that changed owner at `changed` (unix seconds) is still
 * within the chaining window. */
static __always_inline int chain_fresh(struct chain_cfg *cfg, __u32 changed)
{
	if (!cfg || !cfg->wall_offset_ns || !cfg->window_s)
		return 0;
	__u64 now = (bpf_ktime_get_boot_ns() + cfg->wall_offset_ns) / NSEC_PER_SEC;
	return now < (__u64)changed + cfg->window_s;
}

/* Whether a packet that would be chained to prev, from outer source src,
 * must be dropped instead: unless src is known and prev a known previous
 * owner, it is, and counted. Checked only once a packet would be chained,
 * so delivered packets cost no lookup. */
static __always_inline int chain_untrusted(__be32 src)
{
	if (chain_trusted(src))
		return 0;
	chain_count(CHAIN_DROP_UNTRUSTED_SOURCE, 0);
	return 1;
}

static __always_inline int chain_refused(__be32 src, __be32 prev)
{
	if (chain_untrusted(src))
		return 1;
	if (!chain_known(&chain_to, prev)) {
		chain_count(CHAIN_DROP_UNKNOWN_OWNER, 0);
		return 1;
	}
	return 0;
}

/* Whether a local socket takes the packet iph/th (a connection being
 * opened, established or closing), or a listener when the packet is the
 * ACK of a SYN cookie the listener sent. A socket in TIME-WAIT does not:
 * its connection is over, and a packet with its addresses and ports
 * belongs to a newer connection from the same client port, which went to
 * another backend (the client reused the port while this host still
 * held the old connection's TIME-WAIT, as a server that closes first
 * does). Taken here, that packet would only draw a bare ACK, again on
 * every retransmission, and the connection would hang; chained, it
 * reaches the previous owner that holds it. (A late segment of the
 * closed connection goes on too, and is answered there with a reset: its
 * client is closing anyway.) netns is the
 * network namespace to look in: BPF_F_CURRENT_NETNS for this host's own,
 * or the ID of a pod's. iph and th may lie in the packet (checked by the
 * caller) or on the stack. Returns the chain_stat that delivers the
 * packet, or CHAIN_STAT_MAX. */
static __always_inline __u32 chain_socket(struct xdp_md *ctx, struct iphdr *iph,
					  struct chain_tcphdr *th, __u64 netns)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	__u32 stat = CHAIN_STAT_MAX;

	t.ipv4.saddr = iph->saddr;
	t.ipv4.daddr = iph->daddr;
	t.ipv4.sport = th->source;
	t.ipv4.dport = th->dest;
	sk = bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv4), netns, 0);
	if (!sk)
		return stat;
	if (sk->state == BPF_TCP_TIME_WAIT) {
		/* not a connection: see above */
	} else if (sk->state != BPF_TCP_LISTEN) {
		stat = CHAIN_SOCKET;
	} else if ((th->flags & (TCP_FLAG_ACK | TCP_FLAG_SYN | TCP_FLAG_RST)) == TCP_FLAG_ACK &&
		   /* The cookie check reads the fixed TCP header only. */
		   bpf_tcp_check_syncookie(sk, iph, sizeof(*iph), (void *)th, sizeof(*th)) == 0) {
		stat = CHAIN_SYNCOOKIE;
	}
	bpf_sk_release(sk);
	return stat;
}

/* Whether local pod `pod` holds the connection of the packet inner/th
 * (to VIP:port), looked up as the pod sees it once translated:
 * client -> pod:targetPort, in the pod's network namespace. CHAIN_STAT_MAX
 * when it does not, and when that cannot be known: no translation of the
 * VIP:port to the pod, or no network namespace ID for it. */
static __always_inline __u32 chain_pod_socket(struct xdp_md *ctx, struct iphdr *inner,
					      struct chain_tcphdr *th, __be32 pod)
{
	struct nat_svc_key k = {.vip = inner->daddr, .pod = pod, .port = th->dest, .proto = IPPROTO_TCP};
	__be16 *target = bpf_map_lookup_elem(&nat_svcs, &k);
	__u32 *netns = bpf_map_lookup_elem(&nat_pod_netns, &pod);
	struct chain_tcphdr pth;
	struct iphdr piph;

	if (!target || !netns)
		return CHAIN_STAT_MAX;
	/* The SYN cookie, too, was computed over the translated addresses. */
	__builtin_memcpy(&piph, inner, sizeof(piph));
	__builtin_memcpy(&pth, th, sizeof(pth));
	piph.daddr = pod;
	pth.dest = *target;
	return chain_socket(ctx, &piph, &pth, *netns);
}

/* Send the still encapsulated packet on to prev, from the host address it
 * was sent to, with next (the owner before prev, or 0) as the hint's only
 * previous owner: every hop uses up one, so a packet is chained at most
 * twice and never in a loop. The outer UDP checksum becomes 0 (none, as xlb sends it):
 * the new addresses would break any other. The inner packet is untouched.
 *
 * A next hop the kernel has not resolved yet (backends rarely talk to
 * each other, so the first chained packet to each usually finds none)
 * goes to the stack instead, re-addressed to prev but still from the xlb
 * node that sent it: the stack forwards it (`xlb backend` turns on
 * forwarding on the interface) and resolves the neighbour, and the next
 * packets take the fast path. With this host as its source the stack
 * would drop it as a martian. */
static __always_inline int chain_forward(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *ip,
					 struct udphdr *udp, struct gue_hint *hint, __be32 prev,
					 __be32 next)
{
	struct bpf_fib_lookup fib = {};
	__u16 len = bpf_ntohs(ip->tot_len);
	long rc;

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = IPPROTO_UDP;
	fib.tot_len = len;
	fib.ipv4_src = ip->daddr;
	fib.ipv4_dst = prev;
	fib.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		hint->prev = next;
		hint->prev2 = 0;
		udp->check = 0;
		ip->daddr = prev;
		ip->ttl = XLB_OUTER_TTL;
		ip->check = 0;
		ip->check = ipv4_csum(ip);
		chain_count(CHAIN_CHAINED, len);
		chain_count(CHAIN_NO_NEIGHBOUR, len);
		return XDP_PASS;
	}
	/* Unreachable, forwarding disabled on the interface, or an MTU
	 * towards prev smaller than the path the packet came by. */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		chain_count(CHAIN_NO_ROUTE, 0);
		return XDP_DROP;
	}

	hint->prev = next;
	hint->prev2 = 0;
	udp->check = 0;
	ip->saddr = ip->daddr;
	ip->daddr = prev;
	ip->ttl = XLB_OUTER_TTL;
	ip->check = 0;
	ip->check = ipv4_csum(ip);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	chain_count(CHAIN_CHAINED, len);
	if (fib.ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(fib.ifindex, 0);
}

/* The TCP header of an inner packet whose hint the decision reads, or 0:
 * no hint at all (an LB instance sends a zero hint for a service without
 * a chain, or when its lookup fails), a fragment, or a header that the
 * frame or the inner datagram does not hold (the stack judges it). */
static __always_inline struct chain_tcphdr *chain_tcp(struct iphdr *ip, struct gue_hint *hint,
						      struct iphdr *inner, __u32 inner_len,
						      void *data_end)
{
	struct udphdr *udp = (void *)(ip + 1);
	__u32 ihl = inner->ihl * 4;
	struct chain_tcphdr *th;

	if ((void *)(hint + 1) > data_end || (void *)(udp + 1) > data_end)
		return 0;
	if (!hint->prev && !hint->prev2 && !hint->generation)
		return 0;
	if (inner->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return 0;
	th = (void *)inner + ihl;
	if ((void *)(th + 1) > data_end || ihl + sizeof(*th) > inner_len)
		return 0;
	return th;
}

/* A hinted packet no socket takes, and no previous owner either: dropped
 * when an LB instance with a newer table of the service has been heard
 * from (generation 0 means unknown, never stale), else delivered for the
 * stack to answer. */
static __always_inline int chain_no_owner(__u32 gen, __u32 newest, __u32 inner_len)
{
	if (gen && gen < newest) {
		chain_count(CHAIN_STALE_DROP, 0);
		return XDP_DROP;
	}
	chain_count(CHAIN_NO_SOCKET, inner_len);
	return CHAIN_DELIVER;
}

/* The hint's decision for an inner TCP packet to a local VIP: deliver it
 * (CHAIN_DELIVER), chain it to the slot's previous owner, or drop it. */
static __always_inline int chain_decide(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *ip,
					struct gue_hint *hint, struct iphdr *inner, __u32 inner_len,
					void *data_end)
{
	struct chain_tcphdr *th = chain_tcp(ip, hint, inner, inner_len, data_end);
	struct chain_cfg *cfg;
	__u32 newest, gen, stat;
	__be32 prev, next;

	if (!th)
		return CHAIN_DELIVER;
	cfg = chain_config();
	gen = bpf_ntohl(hint->generation);
	newest = gen ? chain_newest_gen(cfg, ip->saddr, inner->daddr, th->dest, gen) : 0;

	if ((th->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN) {
		chain_count(CHAIN_SYN, inner_len);
		return CHAIN_DELIVER;
	}
	stat = chain_socket(ctx, inner, th, BPF_F_CURRENT_NETNS);
	if (stat != CHAIN_STAT_MAX) {
		chain_count(stat, inner_len);
		return CHAIN_DELIVER;
	}
	/* The first previous owner that is not this host; the one after it
	 * travels on in the hint, for the next hop to try in turn. */
	prev = hint->prev;
	next = hint->prev2;
	if (!prev || bpf_map_lookup_elem(&host_addrs, &prev)) {
		prev = next;
		next = 0;
		if (prev && bpf_map_lookup_elem(&host_addrs, &prev))
			prev = 0;
	}
	if (prev && chain_fresh(cfg, bpf_ntohl(hint->changed))) {
		if (chain_refused(ip->saddr, prev))
			return XDP_DROP;
		return chain_forward(ctx, eth, ip, (void *)(ip + 1), hint, prev, next);
	}
	return chain_no_owner(gen, newest, inner_len);
}

/* The same decision for an inner TCP packet tunnelled to local pod *pod
 * (Kubernetes mode), where the sockets are the pods', each in its own
 * network namespace, and a previous owner may be another pod of this
 * node. A previous owner here that holds the connection gets it at once:
 * *pod becomes that pod, and the caller translates for it (counted as
 * chained). One elsewhere gets the packet through the fabric, as in the
 * host mode. A pod whose network namespace is unknown is never chained:
 * its packet is delivered without a count, as without a hint. */
static __always_inline int chain_decide_pod(struct xdp_md *ctx, struct ethhdr *eth,
					    struct iphdr *ip, struct gue_hint *hint,
					    struct iphdr *inner, __u32 inner_len, void *data_end,
					    __be32 *pod)
{
	struct chain_tcphdr *th = chain_tcp(ip, hint, inner, inner_len, data_end);
	struct chain_cfg *cfg;
	__u32 newest, gen, stat;
	__be32 prev, prev2;

	if (!th)
		return CHAIN_DELIVER;
	cfg = chain_config();
	gen = bpf_ntohl(hint->generation);
	newest = gen ? chain_newest_gen(cfg, ip->saddr, inner->daddr, th->dest, gen) : 0;

	if ((th->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN) {
		chain_count(CHAIN_SYN, inner_len);
		return CHAIN_DELIVER;
	}
	if (!bpf_map_lookup_elem(&nat_pod_netns, pod))
		return CHAIN_DELIVER;
	stat = chain_pod_socket(ctx, inner, th, *pod);
	if (stat != CHAIN_STAT_MAX) {
		chain_count(stat, inner_len);
		return CHAIN_DELIVER;
	}
	prev = hint->prev;
	prev2 = hint->prev2;
	if (!chain_fresh(cfg, bpf_ntohl(hint->changed)))
		return chain_no_owner(gen, newest, inner_len);
	/* The hint never names the current owner; this host is skipped all
	 * the same, as in the host mode. A local pod is a known previous
	 * owner (it is translated for); a packet from an unknown source is
	 * not handed to it either. */
	if (prev && prev != *pod && !bpf_map_lookup_elem(&host_addrs, &prev)) {
		if (!bpf_map_lookup_elem(&nat_pods, &prev)) {
			if (chain_refused(ip->saddr, prev))
				return XDP_DROP;
			return chain_forward(ctx, eth, ip, (void *)(ip + 1), hint, prev, prev2);
		}
		if (chain_pod_socket(ctx, inner, th, prev) != CHAIN_STAT_MAX) {
			if (chain_untrusted(ip->saddr))
				return XDP_DROP;
			chain_count(CHAIN_CHAINED, inner_len);
			*pod = prev;
			return CHAIN_DELIVER;
		}
	}
	if (prev2 && prev2 != *pod && !bpf_map_lookup_elem(&host_addrs, &prev2)) {
		if (!bpf_map_lookup_elem(&nat_pods, &prev2)) {
			if (chain_refused(ip->saddr, prev2))
				return XDP_DROP;
			return chain_forward(ctx, eth, ip, (void *)(ip + 1), hint, prev2, 0);
		}
		if (chain_pod_socket(ctx, inner, th, prev2) != CHAIN_STAT_MAX) {
			if (chain_untrusted(ip->saddr))
				return XDP_DROP;
			chain_count(CHAIN_CHAINED, inner_len);
			*pod = prev2;
			return CHAIN_DELIVER;
		}
	}
	return chain_no_owner(gen, newest, inner_len);
}

/* Frames that are not a tunnel to this host or a local pod reach the
 * stack exactly as they would without xlb, malformed ones included: the
 * stack checks IPv4 headers itself (and counts what it rejects). A tunnel
 * to us is ours to check: the outer length must fit the frame and the
 * inner packet the outer datagram, or it is dropped. */
SEC("xdp")
int xlb_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip, *inner;
	struct guehdr *gue = 0;
	struct gue_hint *hint = 0;
	__u32 strip, stat, outer_len, inner_len;
	int to_pod = 0;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return verdict(DECAP_PASS, 0, XDP_PASS);
	ip = (void *)(eth + 1);
	/* xlb's outer header is 20 bytes, version 4, no options. */
	if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->version != 4)
		return verdict(DECAP_PASS, 0, XDP_PASS);
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		/* The stack reassembles; our encapsulation never fragments. */
		return verdict(DECAP_PASS, 0, XDP_PASS);

	if (ip->protocol == IPPROTO_IPIP) {
		strip = sizeof(*ip);
		stat = DECAP_IPIP;
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *udp = (void *)(ip + 1);

		gue = (void *)(udp + 1);
		if ((void *)(gue + 1) > data_end || udp->dest != bpf_htons(XLB_GUE_PORT))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		strip = 0; /* set below, once the destination is known to be local */
		stat = DECAP_GUE;
	} else {
		return verdict(DECAP_PASS, 0, XDP_PASS);
	}
	/* Only tunnels get this far, so other traffic costs no lookup. */
	if (!bpf_map_lookup_elem(&host_addrs, &ip->daddr)) {
		if (!bpf_map_lookup_elem(&nat_pods, &ip->daddr))
			return verdict(DECAP_PASS, 0, XDP_PASS);
		to_pod = 1;
	}
	/* Ethernet padding may follow the datagram; a datagram longer than
	 * the frame lost its end. */
	outer_len = bpf_ntohs(ip->tot_len);
	if ((void *)ip + outer_len > data_end)
		return drop_malformed(to_pod);

	if (gue) {
		switch (gue->hlen_c_ver >> 6) {
		case 0: /* variant 0: control bit clear, IPv4 inside */
			if ((gue->hlen_c_ver & 0x20) || gue->proto != IPPROTO_IPIP)
				return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
			strip = sizeof(*ip) + sizeof(struct udphdr) + sizeof(*gue) +
				(gue->hlen_c_ver & 0x1f) * 4;
			/* Other private data carries no hint and is skipped. */
			if ((gue->hlen_c_ver & 0x1f) == GUE_HINT_HLEN)
				hint = (void *)(gue + 1);
			break;
		case 1: /* variant 1: the IPv4 header follows the UDP header */
			if ((gue->hlen_c_ver >> 4) != 4)
				return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
			strip = sizeof(*ip) + sizeof(struct udphdr);
			break;
		default:
			return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
		}
	}

	if (strip > 20 + 8 + 4 + 31 * 4)
		return verdict(DECAP_DROP_GUE, 0, XDP_DROP);
	/* The inner packet must lie within the outer datagram, which lies
	 * within the frame: nothing after it travels on. */
	inner = (void *)ip + strip;
	if ((void *)(inner + 1) > data_end || inner->version != 4 || inner->ihl < 5)
		return drop_malformed(to_pod);
	inner_len = bpf_ntohs(inner->tot_len);
	if (inner_len < inner->ihl * 4 || strip + inner_len > outer_len)
		return drop_malformed(to_pod);

	if (to_pod) {
		__be32 pod = ip->daddr;
		int r;

		if (hint && inner->protocol == IPPROTO_TCP) {
			int v = chain_decide_pod(ctx, eth, ip, hint, inner, inner_len, data_end, &pod);

			if (v != CHAIN_DELIVER)
				return v;
		}
		r = nat_forward(data_end, inner, pod);

		if (r != NAT_FWD && r != NAT_FWD_ICMP) {
			nat_count(r, 0);
			return XDP_DROP;
		}
		if (strip_outer(ctx, eth, strip, data_end))
			return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
		nat_count(r, inner_len);
		return verdict(stat, inner_len, XDP_PASS);
	}

	if (!bpf_map_lookup_elem(&decap_vips, &inner->daddr))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	if (hint && inner->protocol == IPPROTO_TCP) {
		int v = chain_decide(ctx, eth, ip, hint, inner, inner_len, data_end);

		if (v != CHAIN_DELIVER)
			return v;
	}
	if (strip_outer(ctx, eth, strip, data_end))
		return verdict(DECAP_DROP_INNER, 0, XDP_DROP);
	return verdict(stat, inner_len, XDP_PASS);
}

/* TC verdicts: TC_ACT_UNSPEC (TCX_NEXT) lets the packet go on and any
 * later program on the hook see it; TC_ACT_SHOT drops it. */
#define TC_NEXT -1
#define TC_SHOT 2

#define ETH_HLEN 14
#ifndef offsetof
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif
#define IP_CHECK_OFF (ETH_HLEN + 10)
#define IP_SADDR_OFF (ETH_HLEN + 12)

/* The VIP:port a pod's packet pod:pod_port -> client:client_port answers
 * for: its flow record, else the fallback. *stat says which. */
static __always_inline int nat_reply_lookup(__be32 pod, __be16 pod_port, __be32 client,
					    __be16 client_port, __u8 proto, struct nat_vip *out,
					    __u32 *stat)
{
	struct nat_flow_key fk = {
		.pod = pod, .client = client, .pod_port = pod_port,
		.client_port = client_port, .proto = proto,
	};
	struct nat_rev_key rk = {.pod = pod, .pod_port = pod_port, .proto = proto};
	struct nat_vip *v = bpf_map_lookup_elem(&nat_flows, &fk);

	*stat = NAT_REV_FLOW;
	if (!v) {
		v = bpf_map_lookup_elem(&nat_rev_ports, &rk);
		*stat = NAT_REV_FALLBACK;
	}
	if (!v)
		return -1;
	*out = *v;
	return 0;
}

/* An ICMP error leaving the node about a packet that was translated on
 * its way in: the quote says client -> pod:targetPort, and the client
 * only knows client -> VIP:port. The quote is translated back, and the
 * outer source too when the pod sent the error; an error the node itself
 * sent keeps the node's address, as one from any router on the path would.
 * The quoted transport checksum is left alone: no stack checks it. */
static __always_inline int nat_reply_icmp(struct __sk_buff *skb, struct iphdr *ip, __u32 l4off)
{
	struct {
		__u8 type;
		__u8 code;
		__sum16 check;
		__u32 rest;
	} icmp;
	struct iphdr q;
	struct ports qp;
	struct nat_vip v;
	__u32 stat, qoff = l4off + sizeof(icmp), qpoff, icsum = l4off + 2;

	if (bpf_skb_load_bytes(skb, l4off, &icmp, sizeof(icmp)) ||
	    (icmp.type != ICMP_DEST_UNREACH && icmp.type != ICMP_TIME_EXCEEDED_TYPE &&
	     icmp.type != ICMP_PARAMETERPROB_TYPE))
		return TC_NEXT;
	if (bpf_skb_load_bytes(skb, qoff, &q, sizeof(q)) || q.version != 4 || q.ihl < 5 ||
	    (q.protocol != IPPROTO_TCP && q.protocol != IPPROTO_UDP) ||
	    !bpf_map_lookup_elem(&nat_pods, &q.daddr))
		return TC_NEXT;
	qpoff = qoff + q.ihl * 4;
	if (bpf_skb_load_bytes(skb, qpoff, &qp, sizeof(qp)))
		return TC_NEXT;
	if (nat_reply_lookup(q.daddr, qp.dest, q.saddr, qp.source, q.protocol, &v, &stat)) {
		nat_count(NAT_REV_UNTRACKED, 0);
		return TC_NEXT;
	}

	__u16 qcheck = csum_apply(q.check, csum_diff32(q.daddr, v.vip));
	if (bpf_l4_csum_replace(skb, icsum, q.daddr, v.vip, sizeof(v.vip)) ||
	    bpf_l4_csum_replace(skb, icsum, q.check, qcheck, sizeof(qcheck)) ||
	    bpf_l4_csum_replace(skb, icsum, qp.dest, v.port, sizeof(v.port)) ||
	    bpf_skb_store_bytes(skb, qoff + offsetof(struct iphdr, check), &qcheck, sizeof(qcheck), 0) ||
	    bpf_skb_store_bytes(skb, qoff + offsetof(struct iphdr, daddr), &v.vip, sizeof(v.vip), 0) ||
	    bpf_skb_store_bytes(skb, qpoff + offsetof(struct ports, dest), &v.port, sizeof(v.port), 0))
		goto fail;
	if (ip->saddr == q.daddr &&
	    (bpf_l3_csum_replace(skb, IP_CHECK_OFF, ip->saddr, v.vip, sizeof(v.vip)) ||
	     bpf_skb_store_bytes(skb, IP_SADDR_OFF, &v.vip, sizeof(v.vip), 0)))
		goto fail;
	nat_count(NAT_REV_ICMP, bpf_ntohs(ip->tot_len));
	return TC_NEXT;
fail:
	nat_count(NAT_REV_DROP_WRITE, 0);
	return TC_SHOT;
}

/* TC egress on the interface the tunnels arrive on: a pod's reply to a
 * translated flow leaves with source VIP:port, straight to the client.
 * Reads and writes go through skb helpers, so a reply whose headers are
 * not in the linear part is handled the same. */
SEC("tc")
int xlb_nat_reply(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct ports p;
	struct nat_vip v;
	__u32 l4off, csum, stat;
	__u64 udp;

	if (skb->protocol != bpf_htons(ETH_P_IP) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) || ip.version != 4 || ip.ihl < 5)
		return TC_NEXT;
	l4off = ETH_HLEN + ip.ihl * 4;
	if (ip.protocol == IPPROTO_ICMP) {
		if (ip.frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return TC_NEXT;
		return nat_reply_icmp(skb, &ip, l4off);
	}
	if (ip.protocol != IPPROTO_TCP && ip.protocol != IPPROTO_UDP)
		return TC_NEXT;
	if (!bpf_map_lookup_elem(&nat_pods, &ip.saddr))
		return TC_NEXT;
	if (ip.frag_off & bpf_htons(IP_MF | IP_OFFSET)) {
		/* No ports in the later fragments: the reply must not be
		 * fragmented (see docs/kubernetes-datapath.md). */
		nat_count(NAT_REV_FRAGMENT, 0);
		return TC_NEXT;
	}
	/* Too short to hold the transport checksum: not a reply we made. */
	csum = l4off + l4_csum_off(ip.protocol);
	if (csum + sizeof(__sum16) > skb->len || bpf_skb_load_bytes(skb, l4off, &p, sizeof(p)))
		return TC_NEXT;
	if (nat_reply_lookup(ip.saddr, p.source, ip.daddr, p.dest, ip.protocol, &v, &stat)) {
		nat_count(NAT_REV_UNTRACKED, 0);
		return TC_NEXT;
	}

	/* The helpers fix the checksums for every skb state, CHECKSUM_PARTIAL
	 * from a pod's TSO included (only the pseudo-header part changes). For
	 * UDP, BPF_F_MARK_MANGLED_0 keeps a 0 (no checksum) at 0 and sends a
	 * computed 0 as 0xffff. */
	udp = ip.protocol == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (bpf_l4_csum_replace(skb, csum, ip.saddr, v.vip, BPF_F_PSEUDO_HDR | udp | sizeof(v.vip)) ||
	    bpf_l4_csum_replace(skb, csum, p.source, v.port, udp | sizeof(v.port)) ||
	    bpf_l3_csum_replace(skb, IP_CHECK_OFF, ip.saddr, v.vip, sizeof(v.vip)) ||
	    bpf_skb_store_bytes(skb, IP_SADDR_OFF, &v.vip, sizeof(v.vip), 0) ||
	    bpf_skb_store_bytes(skb, l4off, &v.port, sizeof(v.port), 0)) {
		nat_count(NAT_REV_DROP_WRITE, 0);
		return TC_SHOT;
	}
	nat_count(stat, bpf_ntohs(ip.tot_len));
	return TC_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
