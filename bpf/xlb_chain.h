/* Daisy chaining on a backend host (Beamer, NSDI'18): when a table slot
 * moves to this host, connections its previous owner still holds keep
 * arriving here until every LB instance has the new table and the flows
 * end. An xlb node adds a hint to GUE (struct xlb_gue_hint): the slot's
 * previous owner and the one before it, when the slot changed hands and
 * the generation of the service's table. A TCP packet this host holds no
 * connection for goes on to the previous owner for a while after the
 * change, and from there, if that one has none either, to the owner
 * before; one from an LB instance with an older table than some other
 * instance already sent is dropped, so that the client retransmits after
 * the stale instance caught up instead of getting a reset.
 * docs/operations.md (Backend hosts) has the details. A hint is not
 * trusted as it comes: a packet is chained only when its outer source is
 * a known xlb node or backend (chain_from, chain_to) and only to a
 * previous owner in chain_to, so a forged hint cannot make this host send
 * a packet to an address of the sender's choice. Anything else that would
 * have been chained is dropped and counted. */
#ifndef XLB_CHAIN_H
#define XLB_CHAIN_H

#include "xlb_backend_maps.h"

/* A hinted tunnel as the decision reads it, whatever its outer family:
 * the hint's form follows the outer header's (struct xlb_gue_hint over
 * IPv4, struct xlb_gue_hint6 over IPv6, as an xlb node sends them), so
 * its previous owners can be chained to by rewriting the outer header.
 * Owners are 16 bytes here, all zero for none. l3, udp and hint point
 * into the packet (checked by chain_read). */
struct chain_outer {
	union xlb_addr src;   /* the outer source */
	union xlb_addr prev;  /* the hint's previous owners */
	union xlb_addr prev2;
	void *l3;             /* the outer IPv4 or IPv6 header */
	struct udphdr *udp;
	void *hint;           /* struct xlb_gue_hint, or xlb_gue_hint6 when v6 */
	__u32 changed;        /* host order */
	__u32 generation;
	int v6;
};

static __always_inline int chain_addr_none(const union xlb_addr *a)
{
	return !(a->w[0] | a->w[1] | a->w[2] | a->w[3]);
}

/* An IPv4 owner of the hint as 16 bytes: IPv4-mapped, or all zero for
 * none. */
static __always_inline union xlb_addr chain_addr4(__be32 a)
{
	union xlb_addr z = {};

	return a ? XLB_ADDR4(a) : z;
}

/* Fill o from the hinted tunnel at l3 (IPv6 if v6), whose GUE private
 * data at hint is hlen words, UDP header at udp. 0: no hint to follow (a
 * hint of the other family's form, which no xlb node sends, or one the
 * frame does not hold); the packet is then delivered as plain GUE. */
static __always_inline int chain_read(struct chain_outer *o, void *l3, int v6, struct udphdr *udp,
				      void *hint, __u8 hlen, void *data_end)
{
	if ((void *)(udp + 1) > data_end)
		return 0;
	o->l3 = l3;
	o->udp = udp;
	o->hint = hint;
	o->v6 = v6;
	if (v6) {
		struct ipv6hdr *ip6 = l3;
		struct xlb_gue_hint6 *h = hint;

		if (hlen != XLB_GUE_HINT6_WORDS || (void *)(h + 1) > data_end ||
		    (void *)(ip6 + 1) > data_end)
			return 0;
		__builtin_memcpy(o->src.w, ip6->saddr, sizeof(o->src.w));
		o->prev = h->prev;
		o->prev2 = h->prev2;
		o->changed = bpf_ntohl(h->changed);
		o->generation = bpf_ntohl(h->generation);
		return 1;
	}
	struct iphdr *ip = l3;
	struct xlb_gue_hint *h = hint;

	if (hlen != XLB_GUE_HINT_WORDS || (void *)(h + 1) > data_end || (void *)(ip + 1) > data_end)
		return 0;
	o->src = XLB_ADDR4(ip->saddr);
	o->prev = chain_addr4(h->prev);
	o->prev2 = chain_addr4(h->prev2);
	o->changed = bpf_ntohl(h->changed);
	o->generation = bpf_ntohl(h->generation);
	return 1;
}

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
#ifndef AF_INET6
#define AF_INET6 10
#endif
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

static __always_inline int chain_known(void *set, const union xlb_addr *addr)
{
	struct chain_peer_key k = {.prefixlen = 128, .addr = *addr};

	return bpf_map_lookup_elem(set, &k) != 0;
}

/* Whether a packet from src may be chained: sent by a known xlb node, or
 * by a known backend that chained it here. */
static __always_inline int chain_trusted(const union xlb_addr *src)
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
static __always_inline __u32 chain_newest_gen(struct chain_cfg *cfg, const union xlb_addr *src,
					      const union xlb_addr *vip, __be16 port, __u32 gen)
{
	struct chain_svc_key k = {.vip = *vip, .port = port, .proto = IPPROTO_TCP};
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
static __always_inline int chain_untrusted(const union xlb_addr *src)
{
	if (chain_trusted(src))
		return 0;
	chain_count(CHAIN_DROP_UNTRUSTED_SOURCE, 0);
	return 1;
}

static __always_inline int chain_refused(const union xlb_addr *src, const union xlb_addr *prev)
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
 * caller) or on the stack. chain_sock_stat takes the socket found (or
 * 0) and returns the chain_stat that delivers the packet, or
 * CHAIN_STAT_MAX. */
static __always_inline __u32 chain_sock_stat(struct bpf_sock *sk, void *iph, __u32 iph_len,
					     struct chain_tcphdr *th)
{
	__u32 stat = CHAIN_STAT_MAX;

	if (!sk)
		return stat;
	if (sk->state == BPF_TCP_TIME_WAIT) {
		/* not a connection: see above */
	} else if (sk->state != BPF_TCP_LISTEN) {
		stat = CHAIN_SOCKET;
	} else if ((th->flags & (TCP_FLAG_ACK | TCP_FLAG_SYN | TCP_FLAG_RST)) == TCP_FLAG_ACK &&
		   /* The cookie check reads the fixed TCP header only. */
		   bpf_tcp_check_syncookie(sk, iph, iph_len, (void *)th, sizeof(*th)) == 0) {
		stat = CHAIN_SYNCOOKIE;
	}
	bpf_sk_release(sk);
	return stat;
}

static __always_inline __u32 chain_socket(struct xdp_md *ctx, struct iphdr *iph,
					  struct chain_tcphdr *th, __u64 netns)
{
	struct bpf_sock_tuple t = {};

	t.ipv4.saddr = iph->saddr;
	t.ipv4.daddr = iph->daddr;
	t.ipv4.sport = th->source;
	t.ipv4.dport = th->dest;
	return chain_sock_stat(bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv4), netns, 0), iph,
			       sizeof(*iph), th);
}

/* The same for an IPv6 packet. */
static __always_inline __u32 chain_socket6(struct xdp_md *ctx, struct ipv6hdr *iph,
					   struct chain_tcphdr *th, __u64 netns)
{
	struct bpf_sock_tuple t = {};

	__builtin_memcpy(t.ipv6.saddr, iph->saddr, sizeof(t.ipv6.saddr));
	__builtin_memcpy(t.ipv6.daddr, iph->daddr, sizeof(t.ipv6.daddr));
	t.ipv6.sport = th->source;
	t.ipv6.dport = th->dest;
	return chain_sock_stat(bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv6), netns, 0), iph,
			       sizeof(*iph), th);
}

/* Whether local pod `pod` holds the connection of the packet inner/th
 * (to VIP:port), looked up as the pod sees it once translated:
 * client -> pod:targetPort, in the pod's network namespace. CHAIN_STAT_MAX
 * when it does not, and when that cannot be known: no translation of the
 * VIP:port to the pod, or no network namespace ID for it. */
static __always_inline __u32 chain_pod_socket(struct xdp_md *ctx, struct iphdr *inner,
					      struct chain_tcphdr *th, __be32 pod)
{
	struct nat_svc_key k = {
		.vip = XLB_ADDR4(inner->daddr), .pod = XLB_ADDR4(pod), .port = th->dest, .proto = IPPROTO_TCP,
	};
	__be16 *target = bpf_map_lookup_elem(&nat_svcs, &k);
	__u32 *netns = lookup_addr4(&nat_pod_netns, pod);
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

/* chain_pod_socket for an IPv6 packet inner/th to local IPv6 pod *pod. */
static __always_inline __u32 chain_pod_socket6(struct xdp_md *ctx, struct ipv6hdr *inner,
					       struct chain_tcphdr *th, const union xlb_addr *pod)
{
	struct nat_svc_key k = {.pod = *pod, .port = th->dest, .proto = IPPROTO_TCP};
	struct chain_tcphdr pth;
	struct ipv6hdr piph;
	__be16 *target;
	__u32 *netns;

	__builtin_memcpy(k.vip.w, inner->daddr, sizeof(k.vip.w));
	target = bpf_map_lookup_elem(&nat_svcs, &k);
	netns = bpf_map_lookup_elem(&nat_pod_netns, pod);
	if (!target || !netns)
		return CHAIN_STAT_MAX;
	__builtin_memcpy(&piph, inner, sizeof(piph));
	__builtin_memcpy(&pth, th, sizeof(pth));
	__builtin_memcpy(piph.daddr, pod->w, sizeof(piph.daddr));
	pth.dest = *target;
	return chain_socket6(ctx, &piph, &pth, *netns);
}

/* The end of chain_forward4 and chain_forward6, the outer header
 * rewritten for prev: the packet counts as chained, and goes to the stack
 * when the next hop fib found (rc) is not resolved yet, or out with its
 * MACs. */
static __always_inline int chain_send(struct xdp_md *ctx, struct ethhdr *eth,
				      const struct bpf_fib_lookup *fib, long rc, __u16 len)
{
	chain_count(CHAIN_CHAINED, len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		chain_count(CHAIN_NO_NEIGHBOUR, len);
		return XDP_PASS;
	}
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	if (fib->ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(fib->ifindex, 0);
}

/* Send the still encapsulated packet on to prev, from the host address it
 * was sent to, with next (the owner before prev, or none) as the hint's
 * only previous owner: every hop uses up one, so a packet is chained at
 * most twice and never in a loop. The outer UDP checksum becomes 0 (none, as xlb sends it):
 * the new addresses would break any other. The inner packet is untouched.
 *
 * A next hop the kernel has not resolved yet (backends rarely talk to
 * each other, so the first chained packet to each usually finds none)
 * goes to the stack instead, re-addressed to prev but still from the xlb
 * node that sent it: the stack forwards it (`xlb backend` turns on
 * forwarding on the interface) and resolves the neighbour, and the next
 * packets take the fast path. With this host as its source the stack
 * would drop it as a martian. */
static __always_inline int chain_forward4(struct xdp_md *ctx, struct ethhdr *eth,
					  struct chain_outer *o, __be32 prev, __be32 next)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = o->l3;
	struct udphdr *udp = o->udp;
	struct xlb_gue_hint *hint = o->hint;
	struct bpf_fib_lookup fib = {};
	long rc;

	if ((void *)(ip + 1) > data_end || (void *)(udp + 1) > data_end ||
	    (void *)(hint + 1) > data_end)
		return XDP_DROP;
	__u16 len = bpf_ntohs(ip->tot_len);

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = IPPROTO_UDP;
	fib.tot_len = len;
	fib.ipv4_src = ip->daddr;
	fib.ipv4_dst = prev;
	fib.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	/* Unreachable, forwarding disabled on the interface, or an MTU
	 * towards prev smaller than the path the packet came by. */
	if (rc != BPF_FIB_LKUP_RET_NO_NEIGH && rc != BPF_FIB_LKUP_RET_SUCCESS) {
		chain_count(CHAIN_NO_ROUTE, 0);
		return XDP_DROP;
	}
	hint->prev = next;
	hint->prev2 = 0;
	udp->check = 0;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		ip->saddr = ip->daddr;
	ip->daddr = prev;
	ip->ttl = XLB_OUTER_TTL;
	ip->check = 0;
	ip->check = ipv4_csum(ip);
	return chain_send(ctx, eth, &fib, rc, len);
}

/* chain_forward4 for a tunnel over IPv6 (an IPv6 backend's, with the
 * 40-byte hint): the same rewrite of the outer IPv6 header, which has no
 * checksum; the UDP checksum becomes 0, as xlb sends GUE over IPv6 (RFC
 * 6935). Extension headers between the IPv6 and UDP headers stay. */
static __always_inline int chain_forward6(struct xdp_md *ctx, struct ethhdr *eth,
					  struct chain_outer *o, const union xlb_addr *prev,
					  const union xlb_addr *next)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = o->l3;
	struct udphdr *udp = o->udp;
	struct xlb_gue_hint6 *hint = o->hint;
	struct bpf_fib_lookup fib = {};
	long rc;

	if ((void *)(ip6 + 1) > data_end || (void *)(udp + 1) > data_end ||
	    (void *)(hint + 1) > data_end)
		return XDP_DROP;
	__u16 len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);

	fib.family = AF_INET6;
	fib.flowinfo = ip6->vtf & bpf_htonl(0x0fffffff);
	fib.l4_protocol = IPPROTO_UDP;
	fib.tot_len = len;
	__builtin_memcpy(fib.ipv6_src, ip6->daddr, sizeof(fib.ipv6_src));
	__builtin_memcpy(fib.ipv6_dst, prev->w, sizeof(fib.ipv6_dst));
	fib.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_NO_NEIGH && rc != BPF_FIB_LKUP_RET_SUCCESS) {
		chain_count(CHAIN_NO_ROUTE, 0);
		return XDP_DROP;
	}
	hint->prev = *next;
	__builtin_memset(&hint->prev2, 0, sizeof(hint->prev2));
	udp->check = 0;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		__builtin_memcpy(ip6->saddr, ip6->daddr, sizeof(ip6->saddr));
	__builtin_memcpy(ip6->daddr, prev->w, sizeof(ip6->daddr));
	ip6->hop_limit = XLB_OUTER_TTL;
	return chain_send(ctx, eth, &fib, rc, len);
}

/* Chain the tunnel o on to prev in its outer family. */
static __always_inline int chain_forward(struct xdp_md *ctx, struct ethhdr *eth,
					 struct chain_outer *o, const union xlb_addr *prev,
					 const union xlb_addr *next)
{
	if (o->v6)
		return chain_forward6(ctx, eth, o, prev, next);
	return chain_forward4(ctx, eth, o, prev->w[3], next->w[3]);
}

/* Whether the hint says anything at all (an LB instance sends a zero hint
 * for a service without a chain, or when its lookup fails). */
static __always_inline int chain_hinted(const struct chain_outer *o)
{
	return !chain_addr_none(&o->prev) || !chain_addr_none(&o->prev2) || o->generation;
}

/* The TCP header of an inner packet whose hint the decision reads, or 0:
 * no hint at all, a fragment, or a header that the frame or the inner
 * datagram does not hold (the stack judges it). */
static __always_inline struct chain_tcphdr *chain_tcp(const struct chain_outer *o,
						      struct iphdr *inner, __u32 inner_len,
						      void *data_end)
{
	__u32 ihl = inner->ihl * 4;
	struct chain_tcphdr *th;

	if (!chain_hinted(o))
		return 0;
	if (inner->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return 0;
	th = (void *)inner + ihl;
	if ((void *)(th + 1) > data_end || ihl + sizeof(*th) > inner_len)
		return 0;
	return th;
}

/* The same for an IPv6 inner packet, whose TCP header follows the fixed
 * header (a packet with extension headers is not read: the stack judges
 * it). */
static __always_inline struct chain_tcphdr *chain_tcp6(const struct chain_outer *o,
						       struct ipv6hdr *inner, __u32 inner_len,
						       void *data_end)
{
	struct chain_tcphdr *th = (void *)(inner + 1);

	if (!chain_hinted(o) || inner->nexthdr != IPPROTO_TCP)
		return 0;
	if ((void *)(th + 1) > data_end || sizeof(*inner) + sizeof(*th) > inner_len)
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

/* Whether a is none or this host (a hint never names the current owner,
 * but a previous owner may be this host all the same). */
static __always_inline int chain_skip(const union xlb_addr *a)
{
	return chain_addr_none(a) || bpf_map_lookup_elem(&host_addrs, a);
}

/* What becomes of a hinted packet to a local VIP that no local socket
 * takes: chained to the first previous owner that is not this host, or,
 * without one (or once the window is over), chain_no_owner's answer. */
static __always_inline int chain_to_owner(struct xdp_md *ctx, struct ethhdr *eth,
					  struct chain_outer *o, struct chain_cfg *cfg, __u32 newest,
					  __u32 inner_len)
{
	union xlb_addr none = {};
	union xlb_addr *prev = &o->prev, *next = &o->prev2;

	/* The first previous owner that is not this host; the one after it
	 * travels on in the hint, for the next hop to try in turn. */
	if (chain_skip(prev)) {
		prev = next;
		next = &none;
		if (chain_skip(prev))
			prev = &none;
	}
	if (!chain_addr_none(prev) && chain_fresh(cfg, o->changed)) {
		if (chain_refused(&o->src, prev))
			return XDP_DROP;
		return chain_forward(ctx, eth, o, prev, next);
	}
	return chain_no_owner(o->generation, newest, inner_len);
}

/* The hint's decision for an inner TCP packet to a local VIP: deliver it
 * (CHAIN_DELIVER), chain it to the slot's previous owner, or drop it. */
static __always_inline int chain_decide(struct xdp_md *ctx, struct ethhdr *eth,
					struct chain_outer *o, struct iphdr *inner, __u32 inner_len,
					void *data_end)
{
	struct chain_tcphdr *th = chain_tcp(o, inner, inner_len, data_end);
	union xlb_addr vip;
	struct chain_cfg *cfg;
	__u32 newest, gen, stat;

	if (!th)
		return CHAIN_DELIVER;
	cfg = chain_config();
	gen = o->generation;
	vip = XLB_ADDR4(inner->daddr);
	newest = gen ? chain_newest_gen(cfg, &o->src, &vip, th->dest, gen) : 0;

	if ((th->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN) {
		chain_count(CHAIN_SYN, inner_len);
		return CHAIN_DELIVER;
	}
	stat = chain_socket(ctx, inner, th, BPF_F_CURRENT_NETNS);
	if (stat != CHAIN_STAT_MAX) {
		chain_count(stat, inner_len);
		return CHAIN_DELIVER;
	}
	return chain_to_owner(ctx, eth, o, cfg, newest, inner_len);
}

/* The same for an IPv6 packet to a local IPv6 VIP (the tunnel over
 * either family, and chained in its own). */
static __always_inline int chain_decide6(struct xdp_md *ctx, struct ethhdr *eth,
					 struct chain_outer *o, struct ipv6hdr *inner,
					 __u32 inner_len, void *data_end)
{
	struct chain_tcphdr *th = chain_tcp6(o, inner, inner_len, data_end);
	union xlb_addr vip;
	struct chain_cfg *cfg;
	__u32 newest, gen, stat;

	if (!th)
		return CHAIN_DELIVER;
	cfg = chain_config();
	gen = o->generation;
	__builtin_memcpy(vip.w, inner->daddr, sizeof(vip.w));
	newest = gen ? chain_newest_gen(cfg, &o->src, &vip, th->dest, gen) : 0;

	if ((th->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN) {
		chain_count(CHAIN_SYN, inner_len);
		return CHAIN_DELIVER;
	}
	stat = chain_socket6(ctx, inner, th, BPF_F_CURRENT_NETNS);
	if (stat != CHAIN_STAT_MAX) {
		chain_count(stat, inner_len);
		return CHAIN_DELIVER;
	}
	return chain_to_owner(ctx, eth, o, cfg, newest, inner_len);
}

/* The same decision for an inner TCP packet tunnelled over IPv4 to local
 * pod *pod (Kubernetes mode), where the sockets are the pods', each in
 * its own network namespace, and a previous owner may be another pod of
 * this node. A previous owner here that holds the connection gets it at
 * once: *pod becomes that pod, and the caller translates for it (counted
 * as chained). One elsewhere gets the packet through the fabric, as in
 * the host mode. A pod whose network namespace is unknown is never
 * chained: its packet is delivered without a count, as without a hint.
 * IPv4 (o is a tunnel over IPv4 to an IPv4 pod); chain_decide_pod6 is
 * the IPv6 one. */
static __always_inline int chain_decide_pod(struct xdp_md *ctx, struct ethhdr *eth,
					    struct chain_outer *o, struct iphdr *inner,
					    __u32 inner_len, void *data_end, __be32 *pod)
{
	struct chain_tcphdr *th = chain_tcp(o, inner, inner_len, data_end);
	union xlb_addr vip, none = {};
	struct chain_cfg *cfg;
	__u32 newest, gen, stat;
	__be32 prev, prev2;

	if (!th || o->v6)
		return CHAIN_DELIVER;
	cfg = chain_config();
	gen = o->generation;
	vip = XLB_ADDR4(inner->daddr);
	newest = gen ? chain_newest_gen(cfg, &o->src, &vip, th->dest, gen) : 0;

	if ((th->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN) {
		chain_count(CHAIN_SYN, inner_len);
		return CHAIN_DELIVER;
	}
	if (!lookup_addr4(&nat_pod_netns, *pod))
		return CHAIN_DELIVER;
	stat = chain_pod_socket(ctx, inner, th, *pod);
	if (stat != CHAIN_STAT_MAX) {
		chain_count(stat, inner_len);
		return CHAIN_DELIVER;
	}
	prev = o->prev.w[3];
	prev2 = o->prev2.w[3];
	if (!chain_fresh(cfg, o->changed))
		return chain_no_owner(gen, newest, inner_len);
	/* The hint never names the current owner; this host is skipped all
	 * the same, as in the host mode. A local pod is a known previous
	 * owner (it is translated for); a packet from an unknown source is
	 * not handed to it either. */
	if (prev && prev != *pod && !lookup_addr4(&host_addrs, prev)) {
		if (!lookup_addr4(&nat_pods, prev)) {
			if (chain_refused(&o->src, &o->prev))
				return XDP_DROP;
			return chain_forward(ctx, eth, o, &o->prev, &o->prev2);
		}
		if (chain_pod_socket(ctx, inner, th, prev) != CHAIN_STAT_MAX) {
			if (chain_untrusted(&o->src))
				return XDP_DROP;
			chain_count(CHAIN_CHAINED, inner_len);
			*pod = prev;
			return CHAIN_DELIVER;
		}
	}
	if (prev2 && prev2 != *pod && !lookup_addr4(&host_addrs, prev2)) {
		if (!lookup_addr4(&nat_pods, prev2)) {
			if (chain_refused(&o->src, &o->prev2))
				return XDP_DROP;
			return chain_forward(ctx, eth, o, &o->prev2, &none);
		}
		if (chain_pod_socket(ctx, inner, th, prev2) != CHAIN_STAT_MAX) {
			if (chain_untrusted(&o->src))
				return XDP_DROP;
			chain_count(CHAIN_CHAINED, inner_len);
			*pod = prev2;
			return CHAIN_DELIVER;
		}
	}
	return chain_no_owner(gen, newest, inner_len);
}

/* chain_pod_owner6's answer when owner is skipped (none, the pod itself
 * or this host) or is a local pod without the connection. */
#define CHAIN_NEXT_OWNER -2

/* One previous owner of an IPv6 packet to local pod *pod that the pod
 * holds no connection for (chain_decide_pod6): a local pod that holds it
 * gets it (*pod becomes owner, CHAIN_DELIVER), one elsewhere gets the
 * tunnel with next as the owner after it, as in chain_decide_pod. */
static __always_inline int chain_pod_owner6(struct xdp_md *ctx, struct ethhdr *eth,
					    struct chain_outer *o, struct ipv6hdr *inner,
					    struct chain_tcphdr *th, __u32 inner_len,
					    const union xlb_addr *owner, const union xlb_addr *next,
					    union xlb_addr *pod)
{
	if (chain_addr_none(owner) || xlb_addr_eq(owner, pod) ||
	    bpf_map_lookup_elem(&host_addrs, owner))
		return CHAIN_NEXT_OWNER;
	if (!bpf_map_lookup_elem(&nat_pods, owner)) {
		if (chain_refused(&o->src, owner))
			return XDP_DROP;
		return chain_forward6(ctx, eth, o, owner, next);
	}
	if (chain_pod_socket6(ctx, inner, th, owner) == CHAIN_STAT_MAX)
		return CHAIN_NEXT_OWNER;
	if (chain_untrusted(&o->src))
		return XDP_DROP;
	chain_count(CHAIN_CHAINED, inner_len);
	*pod = *owner;
	return CHAIN_DELIVER;
}

/* chain_decide_pod for an inner IPv6 packet tunnelled over IPv6 to local
 * IPv6 pod *pod, as an xlb node sends it to an IPv6 backend (GUE over
 * IPv6 with the 40-byte hint, whose owners are IPv6 addresses): the
 * pods' sockets looked up in IPv6 in their network namespaces, a local
 * previous owner translated for, one elsewhere chained over IPv6. */
static __always_inline int chain_decide_pod6(struct xdp_md *ctx, struct ethhdr *eth,
					     struct chain_outer *o, struct ipv6hdr *inner,
					     __u32 inner_len, void *data_end, union xlb_addr *pod)
{
	struct chain_tcphdr *th = chain_tcp6(o, inner, inner_len, data_end);
	union xlb_addr vip, none = {};
	struct chain_cfg *cfg;
	__u32 newest, gen, stat;
	int v;

	if (!th || !o->v6)
		return CHAIN_DELIVER;
	cfg = chain_config();
	gen = o->generation;
	__builtin_memcpy(vip.w, inner->daddr, sizeof(vip.w));
	newest = gen ? chain_newest_gen(cfg, &o->src, &vip, th->dest, gen) : 0;

	if ((th->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN) {
		chain_count(CHAIN_SYN, inner_len);
		return CHAIN_DELIVER;
	}
	if (!bpf_map_lookup_elem(&nat_pod_netns, pod))
		return CHAIN_DELIVER;
	stat = chain_pod_socket6(ctx, inner, th, pod);
	if (stat != CHAIN_STAT_MAX) {
		chain_count(stat, inner_len);
		return CHAIN_DELIVER;
	}
	if (!chain_fresh(cfg, o->changed))
		return chain_no_owner(gen, newest, inner_len);
	v = chain_pod_owner6(ctx, eth, o, inner, th, inner_len, &o->prev, &o->prev2, pod);
	if (v != CHAIN_NEXT_OWNER)
		return v;
	v = chain_pod_owner6(ctx, eth, o, inner, th, inner_len, &o->prev2, &none, pod);
	if (v != CHAIN_NEXT_OWNER)
		return v;
	return chain_no_owner(gen, newest, inner_len);
}

#endif
