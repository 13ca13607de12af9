/* NAT forwarding of the LB program (services of XLB_ENCAP_NAT and
 * XLB_ENCAP_DNAT): the node rewrites a client's packet to the backend's
 * address and port (and, for NAT, its source to the node's NAT address and
 * a port it allocates), keeps a session, and rewrites the backend's
 * replies back to VIP:port -> client. Not to be confused with xlb_nat.h,
 * the backend host's Kubernetes translation. xlb_lb.h includes this after
 * its own helpers; the maps are in xlb_maps.h, the layouts in
 * xlb_structs.h. docs/decisions/0007-nat-sessions.md says why it is built
 * this way. */
#ifndef XLB_LBNAT_H
#define XLB_LBNAT_H

#define XLB_TCP_FIN 0x01
#define XLB_TCP_RST 0x04

static __always_inline void lbnat_count(__u32 stat)
{
	__u64 *n = bpf_map_lookup_elem(&nat_counters, &stat);

	if (n)
		*n += 1;
}

static __always_inline struct lbnat_cfg *lbnat_config(void)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(&nat_cfg, &k);
}

static __always_inline __u64 lbnat_timeout(const struct lbnat_cfg *c, __u8 state)
{
	if (state == LBNAT_ESTABLISHED)
		return c->tcp_established_ns;
	if (state == LBNAT_CLOSING)
		return c->tcp_closing_ns;
	if (state == LBNAT_UDP)
		return c->udp_ns;
	return c->tcp_syn_ns;
}

/* Whether session s is past its timeout at now. Signed: another CPU may
 * have stamped it a moment after this one read the clock. */
static __always_inline int lbnat_expired(const struct lbnat_cfg *c, const struct lbnat_session *s,
					 __u64 now)
{
	return (__s64)(now - s->last) > (__s64)lbnat_timeout(c, s->state);
}

static __always_inline int lbnat_key_eq(const struct lbnat_key *a, const struct lbnat_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]));
}

/* The forward key of session s: the client's packet as it arrives. */
static __always_inline void lbnat_fwd_key(struct lbnat_key *fk, const struct lbnat_session *s,
					  __u8 proto)
{
	fk->src = s->client;
	fk->dst = s->vip;
	fk->sport = s->client_port;
	fk->dport = s->vip_port;
	fk->proto = proto;
}

/* Whether session s is the one forward key fk names. */
static __always_inline int lbnat_owns(const struct lbnat_session *s, const struct lbnat_key *fk)
{
	return xlb_addr_eq(&s->client, &fk->src) && xlb_addr_eq(&s->vip, &fk->dst) &&
	       s->client_port == fk->sport && s->vip_port == fk->dport;
}

/* Remove session (rk, s) from the established tables or the embryonic
 * ones: its forward entry first, and only if it still names rk (a newer
 * session of the same client may have taken it), then its claim. fk is
 * room for the forward key (the stack has little to spare). */
static __always_inline void lbnat_remove(const struct lbnat_key *rk, const struct lbnat_session *s,
					 const int est, struct lbnat_key *fk)
{
	struct lbnat_key *v;

	lbnat_fwd_key(fk, s, rk->proto);
	fk->pad[0] = fk->pad[1] = fk->pad[2] = 0;
	if (est) {
		struct lbnat_fwd *f = bpf_map_lookup_elem(&nat_fwd, fk);

		if (f && lbnat_key_eq(&f->rk, rk))
			bpf_map_delete_elem(&nat_fwd, fk);
		bpf_map_delete_elem(&nat_rev, rk);
	} else {
		v = bpf_map_lookup_elem(&nat_fwd_syn, fk);
		if (v && lbnat_key_eq(v, rk))
			bpf_map_delete_elem(&nat_fwd_syn, fk);
		bpf_map_delete_elem(&nat_rev_syn, rk);
	}
}

/* Join an established session's forward entry f into session s: the
 * later timestamp (the client's packets stamp only f), and a state that
 * closed. */
static __always_inline void lbnat_merge(struct lbnat_session *s, const struct lbnat_fwd *f)
{
	if ((__s64)(f->last - s->last) > 0)
		s->last = f->last;
	if (f->state == LBNAT_CLOSING && s->state != LBNAT_CLOSING)
		s->state = LBNAT_CLOSING;
}

/* The forward entry of established session (rk, s), if it names rk; fk is
 * room for its key. */
static __always_inline struct lbnat_fwd *lbnat_fwd_of(const struct lbnat_key *rk,
						      const struct lbnat_session *s,
						      struct lbnat_key *fk)
{
	struct lbnat_fwd *f;

	lbnat_fwd_key(fk, s, rk->proto);
	fk->pad[0] = fk->pad[1] = fk->pad[2] = 0;
	f = bpf_map_lookup_elem(&nat_fwd, fk);
	return f && lbnat_key_eq(&f->rk, rk) ? f : 0;
}

/* Whether established session (rk, s), past its timeout by its own
 * stamp, lives by its forward entry's (joined in). Out of line: the
 * port search's frame stays as small as it was. fk is room for a key. */
static __noinline int lbnat_fwd_alive(const struct lbnat_cfg *c, const struct lbnat_key *rk,
				      struct lbnat_session *s, struct lbnat_key *fk, __u64 now)
{
	struct lbnat_fwd *f = lbnat_fwd_of(rk, s, fk);

	if (!f)
		return 0;
	lbnat_merge(s, f);
	return !lbnat_expired(c, s, now);
}

/* Whether session (rk, s), in the established tables when est, is past
 * its timeout at now. Its own stamp is the backend's side's: only when
 * that one is old is the forward entry's read (and joined in), so that a
 * reply reads one entry too. fk is room for a key. */
static __always_inline int lbnat_dead(const struct lbnat_cfg *c, const struct lbnat_key *rk,
				      struct lbnat_session *s, const int est, __u64 now,
				      struct lbnat_key *fk)
{
	if (!lbnat_expired(c, s, now))
		return 0;
	return !est || !lbnat_fwd_alive(c, rk, s, fk, now);
}

/* An expired session is gone: the packet path removes it when it meets
 * it, so that nothing depends on the control plane's sweep. */
static __always_inline void lbnat_reap(const struct lbnat_key *rk, const struct lbnat_session *s,
				       const int est, struct lbnat_key *fk)
{
	__u8 replied = s->flags & LBNAT_REPLIED;

	lbnat_remove(rk, s, est, fk);
	lbnat_count(LBNAT_EXPIRED);
	if (!replied)
		lbnat_count(LBNAT_NO_REPLY);
}

/* The session a client's packet (forward key fk, its established forward
 * entry f or 0) belongs to, with its
 * reverse key in *rk, in *est whether it is established and in *fp its
 * established forward entry (joined into it: lbnat_merge), or 0. A
 * forward entry whose claim is gone or names another client is never
 * used again: it is deleted, and the packet counts as one without a
 * session. The embryonic tables are looked in first for a session whose
 * forward entry is embryonic. */
static __always_inline struct lbnat_session *lbnat_find_from(const struct lbnat_key *fk,
							     struct lbnat_fwd *f,
							     struct lbnat_key *rk, int *est,
							     struct lbnat_fwd **fp)
{
	struct lbnat_session *s;

	*fp = 0;
	if (f) {
		*rk = f->rk;
		*est = 1;
		s = bpf_map_lookup_elem(&nat_rev, rk);
		if (!s) {
			*est = 0;
			s = bpf_map_lookup_elem(&nat_rev_syn, rk);
		}
	} else {
		struct lbnat_key *v = bpf_map_lookup_elem(&nat_fwd_syn, fk);

		if (!v)
			return 0;
		*rk = *v;
		*est = 0;
		s = bpf_map_lookup_elem(&nat_rev_syn, rk);
		if (!s) {
			/* Moved to the established tables meanwhile. */
			*est = 1;
			s = bpf_map_lookup_elem(&nat_rev, rk);
		}
	}
	if (s && rk->proto == fk->proto && lbnat_owns(s, fk)) {
		if (f && *est) {
			lbnat_merge(s, f);
			*fp = f;
		}
		return s;
	}
	if (f)
		bpf_map_delete_elem(&nat_fwd, fk);
	else
		bpf_map_delete_elem(&nat_fwd_syn, fk);
	return 0;
}

/* lbnat_find_from, its established forward entry looked up here. */
static __always_inline struct lbnat_session *lbnat_find(const struct lbnat_key *fk,
							struct lbnat_key *rk, int *est,
							struct lbnat_fwd **fp)
{
	return lbnat_find_from(fk, bpf_map_lookup_elem(&nat_fwd, fk), rk, est, fp);
}

/* The ports of the packet's transport header and where its checksum is,
 * with the TCP flags (0 for UDP): all inside the frame and the datagram.
 * Returns 0, or -1 for a header too short to hold them. */
static __always_inline int lbnat_l4(struct pkt *p, void *data_end, struct ports **pp,
				    __sum16 **check, __u8 *flags)
{
	__u8 *l4 = (void *)p->ip + p->ip->ihl * 4;
	void *dgram_end = (void *)p->ip + p->ip_len;

	if (p->proto == IPPROTO_TCP) {
		if ((void *)(l4 + 18) > data_end || (void *)(l4 + 18) > dgram_end)
			return -1;
		*flags = l4[13];
		*check = (void *)(l4 + 16);
	} else {
		if ((void *)(l4 + 8) > data_end || (void *)(l4 + 8) > dgram_end)
			return -1;
		*flags = 0;
		*check = (void *)(l4 + 6);
	}
	*pp = (void *)l4;
	return 0;
}

/* Rewrite the packet to nsrc:nsport -> ndst:ndport, its IPv4 and
 * transport checksums updated (RFC 1624) and its TTL decremented. A UDP
 * checksum 0 (none) stays 0, a computed 0 goes out as 0xffff (RFC 768). */
static __always_inline void lbnat_rewrite(struct iphdr *ip, struct ports *pp, __sum16 *check,
					  __be32 nsrc, __be16 nsport, __be32 ndst, __be16 ndport)
{
	__u32 d = csum_diff32(ip->saddr, nsrc) + csum_diff32(ip->daddr, ndst);
	int udp = ip->protocol == IPPROTO_UDP;

	if (!udp || *check) {
		__u16 c = csum_apply(*check, d + csum_diff16(pp->source, nsport) +
						     csum_diff16(pp->dest, ndport));

		if (udp && !c)
			c = 0xffff;
		*check = c;
	}
	ip->check = csum_apply(ip->check, d);
	ip->saddr = nsrc;
	ip->daddr = ndst;
	pp->source = nsport;
	pp->dest = ndport;
	ipv4_decrease_ttl(ip);
}

/* The next hop towards dst, through next-hop cache nh (a backend's
 * per-CPU one, a session's, or a blank one that always asks the FIB), for
 * a packet not rewritten yet. Returns 0 when it is known (its MACs in nh),
 * 1 when it is not resolved (the kernel is to forward the packet), or,
 * counted, -(verdict + 1) for the packet instead: a drop, or XDP_TX of an
 * ICMP fragmentation-needed that quotes the packet as it arrived when it
 * does not fit the route and may not be fragmented. icmp: the packet is
 * an ICMP error, never answered with another. */
static __always_inline int lbnat_next_hop(struct xdp_md *ctx, struct nh_entry *nh, __be32 dst,
					  struct iphdr *ip, __u16 len, int icmp,
					  struct bpf_fib_lookup *fib)
{
	__u64 now = bpf_jiffies64();

	if (nh->gen == nh_gen && len <= nh->max_len && now - nh->stamp < XLB_NH_MAX_AGE)
		return 0;
	/* nh_refill's own frame would not fit beside the NAT path's: the
	 * FIB's argument lives in the scratch map. */
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->ipv4_src = node_addr;
	fib->ipv4_dst = dst;
	long rc = nh_lookup(ctx, nh, fib, len | ((__u32)ip->tos << 16));

	if ((rc & 0xff) == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		if (icmp || !(ip->frag_off & bpf_htons(IP_DF))) {
			count_reason(XLB_DROP_TOO_BIG);
			return -(XDP_DROP + 1);
		}
		if (icmp_frag_needed(ctx, node_addr, rc >> 8)) {
			count_reason(XLB_DROP_ENCAP_FAILED);
			return -(XDP_DROP + 1);
		}
		count_reason(XLB_TX_ICMP_TOO_BIG);
		return -(XDP_TX + 1);
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return 1;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		count_reason(XLB_DROP_NO_ROUTE);
		return -(XDP_DROP + 1);
	}
	return 0;
}

/* The verdict for a rewritten packet whose next hop lbnat_next_hop found
 * (how: 0 or 1). */
static __always_inline int lbnat_emit(struct xdp_md *ctx, struct ethhdr *eth, struct nh_entry *nh,
				      int how)
{
	if (how)
		/* The kernel forwards it and resolves the neighbour. */
		return pass(XLB_PASS_NO_NEIGH);
	__u32 *w = (__u32 *)eth;

	w[0] = nh->macs[0];
	w[1] = nh->macs[1];
	w[2] = nh->macs[2];
	if (nh->ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(nh->ifindex, 0);
}

/* Where the packets of session (rk, bid) of service svc_id go: backend
 * bid's next-hop cache and counters while bid still stands for the
 * session's backend in the service, else none (a drained backend whose id
 * may already be another's: its sessions go on, past the id's cache and
 * counters). */
static __always_inline struct backend_state *lbnat_backend(const struct lbnat_key *rk, __u32 bid,
							    __u32 svc_id, __be16 vport)
{
	struct backend *b = bpf_map_lookup_elem(&backends, &bid);

	if (!b || !xlb_addr_eq(&b->addr, &rk->src) || b->owner != svc_id + 1 ||
	    (b->port ? b->port : vport) != rk->sport)
		return 0;
	return bpf_map_lookup_elem(&backend_stats, &bid);
}

/* ---- Opening a session ---- */

static __always_inline struct lbnat_scratch *lbnat_scratch(void)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(&nat_scratch, &k);
}

/* Set key k to the 5-tuple given, its padding zero (keys are hashed whole). */
static __always_inline void lbnat_set_key(struct lbnat_key *k, __be32 src, __be32 dst, __be16 sport,
					  __be16 dport, __u8 proto)
{
	k->src = XLB_ADDR4(src);
	k->dst = XLB_ADDR4(dst);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->pad[0] = k->pad[1] = k->pad[2] = 0;
}

/* Candidate i of the flow with port hash h: a port drawn from the hash
 * over [min, min + range). internal/dataplane/lb (natPort) has it in Go. */
static __always_inline __u16 lbnat_candidate(__u64 h, __u32 i, __u16 min, __u32 range)
{
	__u32 x = (__u32)fmix64(h + (__u64)i * 0x9e3779b97f4a7c15ULL);

	return min + (__u16)(((__u64)x * range) >> 32);
}

/* Whether claim rk is free at now, reclaiming it from an expired session
 * or from an embryonic one (unanswered, or answered and not acknowledged
 * by its client) that saw no packet for XLB_NAT_SYN_STALE_NS: a flood of
 * spoofed sources, answered or not, holds ports for a second at most. */
static __always_inline int lbnat_claim_free(const struct lbnat_cfg *c, const struct lbnat_key *rk,
					    __u64 now, struct lbnat_key *tmp)
{
	struct lbnat_session *o = bpf_map_lookup_elem(&nat_rev, rk);

	if (o) {
		if (!lbnat_dead(c, rk, o, 1, now, tmp))
			return 0;
		lbnat_reap(rk, o, 1, tmp);
	}
	o = bpf_map_lookup_elem(&nat_rev_syn, rk);
	if (o) {
		if (lbnat_expired(c, o, now)) {
			lbnat_reap(rk, o, 0, tmp);
		} else if ((__s64)(now - o->last) > (__s64)XLB_NAT_SYN_STALE_NS) {
			lbnat_remove(rk, o, 0, tmp);
			lbnat_count(LBNAT_RECLAIMED);
		} else {
			return 0;
		}
	}
	return 1;
}

/* A full memory barrier (a value-returning atomic: x86 xchg, arm64
 * swpal) between an insert into one session table and a look into the
 * other, so that of two CPUs racing for one claim across the tables at
 * least one sees the other's entry. x->ok is its word: it is 0 until a
 * claim is made, and nothing else reads it meanwhile. */
static __always_inline void lbnat_fence(struct lbnat_scratch *x)
{
	__atomic_exchange_n(&x->ok, 0, __ATOMIC_SEQ_CST);
}

/* nat_tw's slot of claim rk (a full-NAT claim: its NAT address is the
 * node's one of the family, so the backend's address, both ports and
 * the protocol tell claims apart). */
static __always_inline struct lbnat_tw *lbnat_tw_slot(const struct lbnat_key *rk)
{
	/* An IPv6 backend's address folded to 32 bits; an IPv4 one (mapped:
	 * words 0 and 1 zero, word 2 0xffff) as it is. */
	__be32 a = rk->src.w[3] ^ rk->src.w[0] ^ rk->src.w[1] ^ (rk->src.w[2] ^ bpf_htonl(0xffff));
	__u64 k = ((__u64)a << 32) |
		  ((__u32)rk->sport | ((__u32)rk->dport << 16));
	__u32 i = (__u32)fmix64(k ^ ((__u64)rk->proto << 56) ^ XLB_NAT_PORT_SEED) &
		  (XLB_NAT_TW_SLOTS - 1);

	return bpf_map_lookup_elem(&nat_tw, &i);
}

/* Who a TIME_WAIT belongs to: the client connection with port hash h
 * (lbnat_port_hash). */
static __always_inline __u32 lbnat_tw_owner(__u64 h)
{
	return (__u32)(h >> 32) | 1;
}

/* The backend of claim rk sent the first FIN of client connection owner
 * at now: it keeps the connection in TIME_WAIT from here. */
static __always_inline void lbnat_tw_mark(const struct lbnat_key *rk, __u64 now, __u32 owner)
{
	struct lbnat_tw *t = lbnat_tw_slot(rk);
	__u32 v = (__u32)(now >> XLB_NAT_TW_SHIFT);

	if (t) {
		t->stamp = v ? v : 1;
		t->owner = owner;
	}
}

/* Whether the backend of claim rk may still hold another client
 * connection's TIME_WAIT on it at now. The same client connection (its
 * address and port) meets its own: its TCP timestamps only grow, and
 * the backend takes its new SYN, so its port is its best. */
static __always_inline int lbnat_tw_busy(const struct lbnat_cfg *c, const struct lbnat_key *rk,
					 __u64 now, __u32 owner)
{
	struct lbnat_tw *t = lbnat_tw_slot(rk);

	if (!t || !t->stamp || t->owner == owner)
		return 0;
	return (__s32)((__u32)(now >> XLB_NAT_TW_SHIFT) - t->stamp) <
	       (__s32)(c->tcp_time_wait_ns >> XLB_NAT_TW_SHIFT);
}

/* Candidate i of the claim being made (bpf_loop: the verifier checks the
 * body once, whatever XLB_NAT_PORT_TRIES is). Returns 1 once it holds a
 * claim. */
static long lbnat_try_port(__u64 i, void *unused)
{
	struct lbnat_scratch *x = lbnat_scratch();
	const struct lbnat_cfg *c = lbnat_config();

	if (!x || !c)
		return 1;
	/* The first x->strict steps try the first candidates, skipping the
	 * ports in a backend's TIME_WAIT; the rest try every candidate
	 * from the first, taking any free port. */
	int strict = i < x->strict;
	__u32 k = strict ? (__u32)i : (__u32)i - x->strict;

	if (x->range)
		x->rk.dport = bpf_htons(lbnat_candidate(x->h, k, c->port_min, x->range));
	if (strict && lbnat_tw_busy(c, &x->rk, x->s.last, lbnat_tw_owner(x->h)))
		return 0;
	/* Looked up before the insert: a failed insert into a full LRU map
	 * may evict another session to make room first. */
	if (!lbnat_claim_free(c, &x->rk, x->s.last, &x->tmp))
		return 0;
	if (bpf_map_update_elem(&nat_rev_syn, &x->rk, &x->s, BPF_NOEXIST))
		return 0;
	/* A session promoted to the established table between the lookup
	 * and the insert (the stale one just reclaimed, say) holds this
	 * claim there: give it back. */
	lbnat_fence(x);
	if (bpf_map_lookup_elem(&nat_rev, &x->rk)) {
		bpf_map_delete_elem(&nat_rev_syn, &x->rk);
		return 0;
	}
	x->ok = 1;
	return 1;
}

/* The hash a flow's candidate ports are drawn from: the flow hash's
 * fmix64 over the whole 5-tuple under a seed of its own, so that a
 * client's connections get other ports even with client-IP affinity. */
static __always_inline __u64 lbnat_port_hash(__be32 saddr, __be32 daddr, __be16 sport,
					     __be16 dport, __u8 proto)
{
	__u64 k = ((__u64)saddr << 32) | ((__u32)sport | ((__u32)dport << 16));

	k ^= (__u64)daddr ^ ((__u64)proto << 56) ^ XLB_NAT_PORT_SEED;
	return fmix64(k);
}

/* The hint slot of backend bid, on this CPU. */
static __always_inline struct lbnat_port_hint *lbnat_hint(__u32 bid)
{
	__u32 k = bid % XLB_NAT_HINT_SLOTS;

	return bpf_map_lookup_elem(&nat_port_hint, &k);
}

/* How many ports a new session to backend bid tries at now: a few while
 * its range is known full on this CPU (nat_port_hint), else all. Two full
 * searches must fail in a row first, so that the rare failure at a high
 * fill (0.1% at 90%) does not make the next sessions fail as well. */
static __always_inline __u32 lbnat_tries(__u32 bid, __u64 now)
{
	struct lbnat_port_hint *h = lbnat_hint(bid);

	if (h && h->backend == bid + 1 && h->fails >= XLB_NAT_HINT_FAILS &&
	    now - h->stamp < XLB_NAT_HINT_NS)
		return XLB_NAT_FAST_TRIES;
	return XLB_NAT_PORT_TRIES;
}

/* Record how a search of tries ports for backend bid at now went. A
 * failed full search counts towards the hint; a failed short one leaves
 * it alone, so that a full search is made again XLB_NAT_HINT_NS after the
 * last one. A port found in a short search makes the next session search
 * in full (and one more failure makes it short again); in a full search,
 * it clears the hint. */
static __always_inline void lbnat_hint_update(__u32 bid, __u64 now, __u32 tries, int ok)
{
	struct lbnat_port_hint *h = lbnat_hint(bid);

	if (!h)
		return;
	if (tries != XLB_NAT_PORT_TRIES) {
		if (ok)
			h->fails = XLB_NAT_HINT_FAILS - 1;
		else
			lbnat_count(LBNAT_ALLOC_FAST_FAIL);
		return;
	}
	if (ok) {
		if (h->backend == bid + 1 && h->fails)
			h->fails = 0;
		return;
	}
	if (h->backend == bid + 1 && now - h->stamp < XLB_NAT_HINT_NS) {
		h->fails++;
	} else {
		h->backend = bid + 1;
		h->fails = 1;
	}
	h->stamp = now;
}

/* The rest of opening a session, for both families: x->rk holds the
 * claim (a full-NAT one with port 0 and x->range, x->h set), x->s the
 * session but its client side; fk is x->fk, bport the backend's port.
 * Claims a port (or the client's tuple, dnat), then the forward entry,
 * both in the embryonic tables. Returns 0 or the reason to drop. */
static __always_inline int lbnat_claim(struct lbnat_scratch *x, const struct lbnat_cfg *c,
				       __be16 bport, __u64 now, int dnat, int tcp)
{
	const struct lbnat_key *fk = &x->fk;

	x->s.client = fk->src;
	x->s.vip = fk->dst;
	x->s.client_port = fk->sport;
	x->s.vip_port = fk->dport;
	x->s.last = now;
	x->s.state = tcp ? LBNAT_SYN : LBNAT_UDP;
	x->s.flags = dnat ? LBNAT_DNAT : 0;

	__u32 tries = dnat ? 1 : lbnat_tries(x->s.backend_id, now);

	/* A short search (a full range) takes any free port. */
	if (tcp && !dnat && tries == XLB_NAT_PORT_TRIES && c->tcp_time_wait_ns)
		x->strict = XLB_NAT_TW_TRIES;

	bpf_loop(tries + x->strict, lbnat_try_port, 0, 0);
	if (!dnat)
		lbnat_hint_update(x->s.backend_id, now, tries, x->ok);
	if (!x->ok) {
		lbnat_count(LBNAT_ALLOC_FAILED);
		return XLB_DROP_NAT_NO_PORT;
	}
	if (bpf_map_update_elem(&nat_fwd_syn, fk, &x->rk, BPF_ANY)) {
		bpf_map_delete_elem(&nat_rev_syn, &x->rk);
		lbnat_count(LBNAT_ALLOC_FAILED);
		return XLB_DROP_NAT_NO_PORT;
	}
	if (dnat) {
		/* Replies to the client pass this node only as transit
		 * traffic: the reverse path looks up packets from this
		 * backend from now on. */
		struct lbnat_be_key *bk = &x->bk;

		bk->addr = x->rk.src;
		bk->port = bport;
		bk->proto = fk->proto;
		bk->pad = 0;
		x->one = 1;
		if (!bpf_map_lookup_elem(&nat_dnat_be, bk))
			bpf_map_update_elem(&nat_dnat_be, bk, &x->one, BPF_NOEXIST);
	}
	lbnat_count(LBNAT_CREATED);
	return 0;
}

/* Open a session for the client's packet x->fk of service svc at now: the
 * backend from the service's Maglev table exactly as DSR picks it, a
 * claim on a free port (NAT) or on the client's own tuple (DNAT), then the
 * forward entry, both in the embryonic tables. Returns 0 with the claim in
 * x->rk and the session in x->s, or the reason to drop the packet. Out of
 * line, so that the hit path's frame stays small: the call chain has 512
 * bytes of stack in all. */
static __noinline int lbnat_open(struct lbnat_scratch *x, const struct svc_slot *svc, __u32 hash,
				 __u64 now, int tcp)
{
	const struct lbnat_key *fk = &x->fk;
	const struct lbnat_cfg *c = lbnat_config();
	int dnat = svc->encap == XLB_ENCAP_DNAT;

	if (!c)
		return XLB_DROP_NAT_NO_PORT;
	/* The backend's id and address go straight into the scratch space:
	 * every byte of stack here counts. */
	__builtin_memset(&x->s, 0, sizeof(x->s));
	if (table_pick(svc->id, flow_slot(hash), &x->s.backend_id, &x->be))
		return XLB_DROP_NO_BACKEND;
	struct backend *b = bpf_map_lookup_elem(&backends, &x->s.backend_id);
	if (!b)
		return XLB_DROP_NO_BACKEND;
	__be32 be_addr = x->be;

	/* Port 0: the backend takes the service's own port. */
	__be16 bport = b->port ? b->port : fk->dport;

	x->range = 0;
	x->ok = 0;
	x->strict = 0;
	if (dnat) {
		lbnat_set_key(&x->rk, be_addr, xlb_addr_v4(&fk->src), bport, fk->sport, fk->proto);
	} else {
		if (!xlb_addr_v4(&c->addr) || c->port_max < c->port_min) {
			lbnat_count(LBNAT_ALLOC_FAILED);
			return XLB_DROP_NAT_NO_PORT;
		}
		lbnat_set_key(&x->rk, be_addr, xlb_addr_v4(&c->addr), bport, 0, fk->proto);
		x->range = (__u32)c->port_max - c->port_min + 1;
		x->h = lbnat_port_hash(xlb_addr_v4(&fk->src), xlb_addr_v4(&fk->dst), fk->sport,
				       fk->dport, fk->proto);
	}
	x->s.client = fk->src;
	x->s.vip = fk->dst;
	x->s.client_port = fk->sport;
	x->s.vip_port = fk->dport;
	x->s.last = now;
	x->s.state = tcp ? LBNAT_SYN : LBNAT_UDP;
	x->s.flags = dnat ? LBNAT_DNAT : 0;

	return lbnat_claim(x, c, bport, now, dnat, tcp);
}

/* Whether a client's packet (TCP flags, 0 for UDP) on session s
 * establishes it: the first one after the backend's reply that is not a
 * SYN or an RST, for TCP the ACK of the SYN-ACK. A spoofed source never
 * sees the reply, so its sessions stay embryonic, in the tables a flood
 * churns, however the backend answers (SYN cookies answer every SYN). */
static __always_inline int lbnat_establishes(const struct lbnat_session *s, __u8 flags, int tcp)
{
	return (s->flags & LBNAT_REPLIED) &&
	       (!tcp || (flags & (XLB_TCP_SYN | XLB_TCP_RST | XLB_TCP_ACK)) == XLB_TCP_ACK);
}

/* A client's TCP segment on session s: FIN or RST closes it; its ACK of
 * the backend's reply establishes it (a SYN on a closing session never
 * gets here: it ends the session, lbnat_session_of). The timestamp is written
 * only when it has aged, so that a busy session's packets do not all
 * write its cache line. */
static __always_inline void lbnat_touch(struct lbnat_session *s, __u8 flags, int tcp, __u64 now)
{
	if (tcp) {
		if (flags & (XLB_TCP_FIN | XLB_TCP_RST)) {
			if (s->state != LBNAT_CLOSING)
				s->state = LBNAT_CLOSING;
		} else if (s->state == LBNAT_SYN) {
			if (lbnat_establishes(s, flags, tcp))
				s->state = LBNAT_ESTABLISHED;
		}
	}
	if (now - s->last > XLB_NAT_TOUCH_NS && (__s64)(now - s->last) > 0)
		s->last = now;
}

/* Open established session s (its forward entry f) again at now, for a
 * client's SYN after it closed: a new connection, in state syn until its
 * client acknowledges the backend's answer (the client's packets read
 * both entries meanwhile: lbnat_session_of), counted as created. It stays
 * in the established tables: its client went through a handshake on this
 * tuple before, and a SYN takes no room there. Forward entry first, as a
 * state that closes is joined from it into the session (lbnat_merge). */
static __always_inline void lbnat_reopen(struct lbnat_session *s, struct lbnat_fwd *f, __u64 now)
{
	f->state = LBNAT_SYN;
	f->last = now;
	s->state = LBNAT_SYN;
	s->flags &= ~LBNAT_REPLIED;
	s->last = now;
	lbnat_count(LBNAT_CREATED);
}

/* The backend a new connection of flow hash gets from service svc's table
 * now, plus one, into x->bid; 0: none. The lookups' keys are map memory
 * (the service's slot, the scratch), not stack, and it is out of line:
 * the call chain's 512 bytes are spent, its callers' frames included. */
static __noinline void lbnat_pick_now(struct lbnat_scratch *x, const struct svc_slot *svc,
				      __u32 hash)
{
	void *table = bpf_map_lookup_elem(&maglev_tables, &svc->id);
	xlb_table_entry *e = 0;

	x->bid = flow_slot(hash);
	if (table)
		e = bpf_map_lookup_elem(table, &x->bid);
	if (!e || (!xlb_table_entry_addr(*e) && !xlb_table_entry_v6(*e))) {
		x->bid = 0;
		return;
	}
	x->bid = (xlb_table_entry_bid(*e) & ~XLB_TABLE_ENTRY_V6) + 1;
}

/* Whether the backend the table gives a SYN now (x->bid, plus one) is
 * session s's, at the address and port its claim x->rk goes to: an id
 * names another backend once its own left and was drained, or the same
 * one at another port. */
static __always_inline int lbnat_same_backend(const struct lbnat_scratch *x,
					      const struct lbnat_session *s)
{
	struct backend *b;

	if (x->bid != s->backend_id + 1)
		return 0;
	b = bpf_map_lookup_elem(&backends, &s->backend_id);
	if (!b)
		return 0;
	__be16 port = b->port ? b->port : x->fk.dport;

	return port == x->rk.sport && b->addr.w[0] == x->rk.src.w[0] &&
	       b->addr.w[1] == x->rk.src.w[1] && b->addr.w[2] == x->rk.src.w[2] &&
	       b->addr.w[3] == x->rk.src.w[3];
}

/* A client's SYN on closing session s (x->rk, in the established tables
 * when est, its forward entry f there or 0) at now: a new connection from
 * a reused port. When the table still gives it the session's backend
 * (x->bid), the session opens again in place, with its claim: what ending
 * it and opening a new one would come to (the port drawn first is this
 * one, the backend takes the SYN as its own client's), without the
 * tables' churn; 1, with x->bid the backend id. Otherwise it ends, and
 * the SYN opens a new one: 0. Out of line: lbnat_session_slow's frame
 * stays as small as the rest of the chain needs. */
static __noinline int lbnat_syn_closing(struct lbnat_scratch *x, struct lbnat_session *s,
					struct lbnat_fwd *f, int est, __u64 now)
{
	if (!est || !f || !lbnat_same_backend(x, s)) {
		lbnat_remove(&x->rk, s, est, &x->fk);
		return 0;
	}
	lbnat_reopen(s, f, now);
	x->bid = s->backend_id;
	return 1;
}

/* ---- Client to backend ---- */

/* Move the session of claim x->rk and client packet x->fk from the
 * embryonic tables to the established ones (lbnat_establishes): the claim
 * first, then a second look that the embryonic claim is still this
 * client's (a new session may have reclaimed it as stale meanwhile: then
 * the claim is the other's, and the copy goes), then the forward entry,
 * and only then are the embryonic entries removed, so that a packet of
 * either direction finds the session all along and the claim is never
 * without a holder. Returns 0, the session moved or (the established
 * tables full) left embryonic, or -1 when it is gone. Out of line: the
 * forward path's frame stays as small as the session's opening needs. */
static __noinline int lbnat_promote(struct lbnat_scratch *x)
{
	struct lbnat_session *s = bpf_map_lookup_elem(&nat_rev_syn, &x->rk);
	struct lbnat_key *v;

	if (!s || !lbnat_owns(s, &x->fk))
		return -1;
	x->f.rk = x->rk;
	x->f.last = s->last;
	x->f.backend_id = s->backend_id;
	x->f.state = s->state;
	x->f.pad[0] = x->f.pad[1] = x->f.pad[2] = 0;
	if (bpf_map_update_elem(&nat_rev, &x->rk, s, BPF_NOEXIST)) {
		/* Another CPU moved it first, or there is no room. */
		s = bpf_map_lookup_elem(&nat_rev, &x->rk);
		if (s)
			return lbnat_owns(s, &x->fk) ? 0 : -1;
		lbnat_count(LBNAT_PROMOTE_FAILED);
		return 0;
	}
	lbnat_fence(x);
	s = bpf_map_lookup_elem(&nat_rev_syn, &x->rk);
	if (s && !lbnat_owns(s, &x->fk)) {
		bpf_map_delete_elem(&nat_rev, &x->rk);
		return -1;
	}
	if (bpf_map_update_elem(&nat_fwd, &x->fk, &x->f, BPF_ANY)) {
		bpf_map_delete_elem(&nat_rev, &x->rk);
		lbnat_count(LBNAT_PROMOTE_FAILED);
		return 0;
	}
	v = bpf_map_lookup_elem(&nat_fwd_syn, &x->fk);
	if (v && lbnat_key_eq(v, &x->rk))
		bpf_map_delete_elem(&nat_fwd_syn, &x->fk);
	bpf_map_delete_elem(&nat_rev_syn, &x->rk);
	lbnat_count(LBNAT_PROMOTED);
	return 0;
}

/* lbnat_session_slow's packet bits, above the TCP flags. */
#define LBNAT_PKT_TCP 0x100
#define LBNAT_PKT_SYN 0x200

/* lbnat_session_of for a packet that reads both entries (forward entry f
 * as looked up, or 0; pkt: the TCP flags and LBNAT_PKT_*): 1 with the
 * session's reverse key in x->rk and its backend id in x->bid, or 0.
 * Out of line: the forward path's frame stays as small as the session's
 * opening needs. */
static __noinline int lbnat_session_slow(struct lbnat_scratch *x, const struct lbnat_cfg *c,
					 struct lbnat_fwd *f, __u32 pkt, __u64 now)
{
	struct lbnat_session *s;
	int tcp = !!(pkt & LBNAT_PKT_TCP);
	__u8 flags = (__u8)pkt;
	int est;

	s = lbnat_find_from(&x->fk, f, &x->rk, &est, &f);
	if (!s)
		return 0;
	if (lbnat_expired(c, s, now)) {
		lbnat_reap(&x->rk, s, est, &x->fk);
		return 0;
	}
	if ((pkt & LBNAT_PKT_SYN) && s->state == LBNAT_CLOSING)
		return lbnat_syn_closing(x, s, f, est, now);
	lbnat_touch(s, flags, tcp, now);
	if (f) {
		if (f->state != s->state)
			f->state = s->state;
		if (f->last != s->last)
			f->last = s->last;
	}
	x->bid = s->backend_id;
	if (!est && lbnat_establishes(s, flags, tcp) && lbnat_promote(x))
		return 0;
	return 1;
}

/* The session of the client's packet x->fk (TCP flags, 0 for UDP; syn:
 * a SYN without ACK) at now, for both families: its reverse key, with
 * its backend id in *bid, or 0 when it has none (the packet may open
 * one). A packet of an established session that neither opens nor closes
 * anything, the common one, reads and stamps its forward entry alone;
 * the others read both entries and keep them agreeing: the session
 * expires, closes, reopens on a SYN after closing (a new connection
 * from a reused port, which takes the service's table as it is now, so
 * that a drained backend gets none; a SYN on a syn session is a
 * retransmission, one on an established session goes where the session
 * goes), is established by the client's answer to its backend's reply,
 * or is gone (its port reclaimed meanwhile). */
static __always_inline const struct lbnat_key *lbnat_session_of(struct lbnat_scratch *x,
								const struct lbnat_cfg *c,
								__u8 flags, int tcp, int syn,
								__u64 now, __u32 *bid)
{
	struct lbnat_fwd *f = bpf_map_lookup_elem(&nat_fwd, &x->fk);

	if (f && !(tcp && (flags & (XLB_TCP_SYN | XLB_TCP_FIN | XLB_TCP_RST))) &&
	    f->state != LBNAT_SYN &&
	    (__s64)(now - f->last) <= (__s64)lbnat_timeout(c, f->state) &&
	    f->rk.proto == x->fk.proto) {
		if (now - f->last > XLB_NAT_TOUCH_NS && (__s64)(now - f->last) > 0)
			f->last = now;
		*bid = f->backend_id;
		return &f->rk;
	}
	if (!lbnat_session_slow(x, c, f, flags | (tcp ? LBNAT_PKT_TCP : 0) | (syn ? LBNAT_PKT_SYN : 0),
				now))
		return 0;
	*bid = x->bid;
	return &x->rk;
}

/* An ICMP error to the VIP about a reply the session's backend sent
 * (p's flow is the quoted one, turned to the client's direction): the
 * backend must see it about its own packet, backend:port -> NAT
 * address:port (or the client, for dnat), addressed to it, and for NAT
 * coming from the NAT address, since a backend of a full-NAT service may
 * have no route to the router that sent it. Its checksums follow: the
 * outer IPv4 one, the quoted IPv4 header's, and the ICMP one over the
 * quote. The quoted transport checksum is left alone, as no stack reads
 * it in an error. */
static __noinline int xlb_lb_nat_icmp(struct xdp_md *ctx, const struct svc_slot *svc)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt pk = {}, *p = &pk;
	const struct lbnat_cfg *c = lbnat_config();
	struct lbnat_scratch *x = lbnat_scratch();

	if (parse_ipv4((void *)(long)ctx->data, data_end, p) != PARSE_NOT_TCP_UDP ||
	    parse_icmp_error(p, data_end) || !c || !x)
		return drop(XLB_DROP_NAT_NO_SESSION);
	struct iphdr *ip = p->ip;
	__u8 *icmp = (void *)ip + ip->ihl * 4;
	struct iphdr *q = (void *)(icmp + 8);
	struct ports *qp;
	struct lbnat_fwd *f;
	int est;

	/* parse_icmp_error checked these; the verifier wants them again. */
	if ((void *)(q + 1) > data_end)
		return drop(XLB_DROP_MALFORMED_L4);
	qp = (void *)q + q->ihl * 4;
	if ((void *)(qp + 1) > data_end)
		return drop(XLB_DROP_MALFORMED_L4);

	lbnat_set_key(&x->fk, p->flow_src, ip->daddr, p->sport, p->dport, p->proto);
	struct lbnat_session *s = lbnat_find(&x->fk, &x->rk, &est, &f);
	if (!s)
		return drop(XLB_DROP_NAT_NO_SESSION);
	if (lbnat_expired(c, s, bpf_ktime_get_coarse_ns())) {
		lbnat_reap(&x->rk, s, est, &x->fk);
		return drop(XLB_DROP_NAT_NO_SESSION);
	}
	struct lbnat_key *rk = &x->rk;
	__be32 be = xlb_addr_v4(&rk->src);
	struct backend_state *bst = lbnat_backend(rk, s->backend_id, svc->id, p->dport);
	struct nh_entry *nh = &x->nh;

	if (bst)
		nh = &bst->nh;
	else
		x->nh.gen = 0;
	int how = lbnat_next_hop(ctx, nh, be, ip, p->ip_len, 1, &x->fib);

	if (how < 0)
		return -how - 1;

	/* The quote: VIP:port -> client:port becomes backend:port ->
	 * source:port, where source is what the backend sees. */
	__be32 qsrc = xlb_addr_v4(&rk->src), qdst = xlb_addr_v4(&rk->dst);
	__be16 qsport = rk->sport, qdport = rk->dport;
	__u32 qd = csum_diff32(q->saddr, qsrc) + csum_diff32(q->daddr, qdst);
	__u16 qcheck = csum_apply(q->check, qd);
	__u32 icmp_d = qd + csum_diff16(q->check, qcheck) + csum_diff16(qp->source, qsport) +
		       csum_diff16(qp->dest, qdport);
	__sum16 *icheck = (void *)(icmp + 2);

	q->check = qcheck;
	q->saddr = qsrc;
	q->daddr = qdst;
	qp->source = qsport;
	qp->dest = qdport;
	*icheck = csum_apply(*icheck, icmp_d);

	__be32 osrc = (svc->encap == XLB_ENCAP_DNAT) ? ip->saddr : xlb_addr_v4(&c->addr);
	__u32 d = csum_diff32(ip->saddr, osrc) + csum_diff32(ip->daddr, be);

	ip->check = csum_apply(ip->check, d);
	ip->saddr = osrc;
	ip->daddr = be;
	ipv4_decrease_ttl(ip);
	lbnat_count(LBNAT_ICMP);
	count_reason(XLB_NOTE_ICMP_TO_BACKEND);
	return lbnat_emit(ctx, p->eth, nh, how);
}

/* The rest of the path for a NAT or DNAT service's packet, client to
 * backend: its session, or a new one if the packet may open one (a TCP
 * SYN without ACK, any UDP datagram); a TCP segment without a session is
 * dropped, as a backend would only answer it with a reset. Out of line:
 * the DSR path does not pay for its registers. */
static __noinline int xlb_lb_nat(struct xdp_md *ctx, const struct svc_slot *svc, __u32 hash)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt pk = {}, *p = &pk;
	const struct lbnat_cfg *c = lbnat_config();
	struct lbnat_scratch *x = lbnat_scratch();

	/* Parsed again rather than handed over: a pointer to the caller's
	 * parse would keep it on the stack, and cost the DSR path. */
	if (parse_ipv4((void *)(long)ctx->data, data_end, p) != PARSE_OK || !c || !x)
		return drop(XLB_DROP_NAT_NO_PORT);
	struct iphdr *ip = p->ip;

	struct ports *pp;
	__sum16 *check;
	__u8 flags;

	if (lbnat_l4(p, data_end, &pp, &check, &flags))
		return drop(XLB_DROP_MALFORMED_L4);
	int tcp = p->proto == IPPROTO_TCP;
	int syn = tcp && (flags & (XLB_TCP_SYN | XLB_TCP_ACK)) == XLB_TCP_SYN;
	__u32 bid;
	__u64 now = bpf_ktime_get_coarse_ns();

	lbnat_set_key(&x->fk, ip->saddr, ip->daddr, p->sport, p->dport, p->proto);
	x->bid = 0;
	if (syn)
		lbnat_pick_now(x, svc, hash);
	const struct lbnat_key *rk = lbnat_session_of(x, c, flags, tcp, syn, now, &bid);

	if (!rk) {
		if (tcp && !syn)
			return drop(XLB_DROP_NAT_NO_SESSION);
		int why = lbnat_open(x, svc, hash, now, tcp);

		if (why)
			return drop(why);
		bid = x->s.backend_id;
		rk = &x->rk;
	}

	__be32 be = xlb_addr_v4(&rk->src);
	struct backend_state *bst = lbnat_backend(rk, bid, svc->id, p->dport);
	struct nh_entry *nh = &x->nh;

	if (bst)
		nh = &bst->nh;
	else
		x->nh.gen = 0;
	__u16 len = p->ip_len;
	int how = lbnat_next_hop(ctx, nh, be, ip, len, 0, &x->fib);

	if (how < 0)
		return -how - 1;
	if (__builtin_expect(p->options, 0))
		count_reason(XLB_NOTE_IP_OPTIONS);
	lbnat_rewrite(ip, pp, check, xlb_addr_v4(&rk->dst), rk->dport, be, rk->sport);
	if (bst) {
		bst->stats.packets++;
		bst->stats.bytes += len;
	}
	lbnat_count(LBNAT_FWD);
	return lbnat_emit(ctx, p->eth, nh, how);
}

/* ---- Backend to client ---- */

/* Whether a packet to daddr:dport (or, for dnat, from backend
 * saddr:sport) may be a session's reply: only the NAT address's allocated
 * range, and the dnat backends in nat_dnat_be, are ever looked up, so the
 * node's own connections on other ports are never claimed. */
static __always_inline int lbnat_reply_tuple(const struct lbnat_cfg *c, __be32 saddr, __be16 sport,
					     __be32 daddr, __be16 dport, __u8 proto)
{
	if (daddr == xlb_addr_v4(&c->addr) && daddr) {
		__u16 port = bpf_ntohs(dport);

		if (port >= c->port_min && port <= c->port_max)
			return 1;
	}
	if (c->flags & LBNAT_CFG_DNAT) {
		struct lbnat_be_key bk = { .addr = XLB_ADDR4(saddr), .port = sport, .proto = proto };

		return bpf_map_lookup_elem(&nat_dnat_be, &bk) != 0;
	}
	return 0;
}

/* The backend closed session (rk, s), in the established tables when est:
 * its forward entry learns it too. fk is room for a key. */
static __always_inline void lbnat_close(const struct lbnat_key *rk, struct lbnat_session *s,
					const int est, struct lbnat_key *fk)
{
	struct lbnat_fwd *f;

	s->state = LBNAT_CLOSING;
	if (!est)
		return;
	f = lbnat_fwd_of(rk, s, fk);
	if (f && f->state != LBNAT_CLOSING)
		f->state = LBNAT_CLOSING;
}

/* The session of reply key rk, with *est saying where; an expired one is
 * removed and not returned. */
static __always_inline struct lbnat_session *lbnat_find_reply(const struct lbnat_cfg *c,
							      const struct lbnat_key *rk, int *est,
							      __u64 now, struct lbnat_key *fk)
{
	struct lbnat_session *s = bpf_map_lookup_elem(&nat_rev, rk);

	*est = 1;
	if (!s) {
		*est = 0;
		s = bpf_map_lookup_elem(&nat_rev_syn, rk);
		if (!s)
			return 0;
	}
	if (lbnat_dead(c, rk, s, *est, now, fk)) {
		lbnat_reap(rk, s, *est, fk);
		return 0;
	}
	return s;
}

/* An ICMP error about a packet this node sent a backend (fragmentation
 * needed on the way to it, port unreachable from it, ...), addressed to
 * the NAT address or, for dnat, to the client: the client must see it
 * about its own packet, client:port -> VIP:port, addressed to it and from
 * the VIP. Returns the verdict, or -1 when it is no session's error (the
 * caller goes on with the packet untouched). */
static __noinline int xlb_lb_nat_reply_icmp(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt pk = {}, *p = &pk;
	struct iphdr *q;
	struct ports *qp;
	const struct lbnat_cfg *c = lbnat_config();

	if (parse_ipv4((void *)(long)ctx->data, data_end, p) != PARSE_NOT_TCP_UDP || !c ||
	    p->fragment || p->ip->protocol != IPPROTO_ICMP)
		return -1;
	struct iphdr *ip = p->ip;
	void *dgram_end = (void *)ip + p->ip_len;
	__u8 *icmp = (void *)ip + ip->ihl * 4;

	if (past_datagram(icmp + 8, dgram_end, data_end))
		return -1;
	if (icmp[0] != ICMP_DEST_UNREACH && icmp[0] != ICMP_TIME_EXCEEDED &&
	    icmp[0] != ICMP_PARAMETERPROB)
		return -1;
	q = (void *)(icmp + 8);
	if (past_datagram(q + 1, dgram_end, data_end) || q->ihl < 5)
		return -1;
	if (q->protocol != IPPROTO_TCP && q->protocol != IPPROTO_UDP)
		return -1;
	qp = (void *)q + q->ihl * 4;
	if (past_datagram(qp + 1, dgram_end, data_end))
		return -1;
	/* The quoted packet went node -> backend: its reply's key is the
	 * quote turned around. */
	if (!lbnat_reply_tuple(c, q->daddr, qp->dest, q->saddr, qp->source, q->protocol))
		return -1;
	struct lbnat_scratch *x = lbnat_scratch();
	int est;

	if (!x)
		return -1;
	lbnat_set_key(&x->rk, q->daddr, q->saddr, qp->dest, qp->source, q->protocol);
	struct lbnat_session *s = lbnat_find_reply(c, &x->rk, &est, bpf_ktime_get_coarse_ns(), &x->fk);

	if (!s) {
		lbnat_count(LBNAT_REV_MISS);
		return pass(XLB_PASS_NOT_TCP_UDP);
	}
	if (ip->ttl <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);
	__be32 client = xlb_addr_v4(&s->client), vip = xlb_addr_v4(&s->vip);
	int how = lbnat_next_hop(ctx, &s->nh, client, ip, p->ip_len, 1, &x->fib);

	if (how < 0)
		return -how - 1;

	__u32 qd = csum_diff32(q->saddr, client) + csum_diff32(q->daddr, vip);
	__u16 qcheck = csum_apply(q->check, qd);
	__u32 icmp_d = qd + csum_diff16(q->check, qcheck) +
		       csum_diff16(qp->source, s->client_port) + csum_diff16(qp->dest, s->vip_port);
	__sum16 *icheck = (void *)(icmp + 2);

	q->check = qcheck;
	q->saddr = client;
	q->daddr = vip;
	qp->source = s->client_port;
	qp->dest = s->vip_port;
	*icheck = csum_apply(*icheck, icmp_d);

	__u32 d = csum_diff32(ip->saddr, vip) + csum_diff32(ip->daddr, client);

	ip->check = csum_apply(ip->check, d);
	ip->saddr = vip;
	ip->daddr = client;
	ipv4_decrease_ttl(ip);
	lbnat_count(LBNAT_ICMP);
	return lbnat_emit(ctx, p->eth, &s->nh, how);
}

/* A backend's reply, or what looks like one (lbnat_reply_tuple): found
 * by its own 5-tuple, rewritten to come from VIP:port and go to the
 * client, and sent there. Returns the verdict, or -1 when the packet is no
 * candidate at all (the caller goes on with it untouched). A candidate
 * without a session goes to the kernel untouched and is counted. */
static __noinline int xlb_lb_nat_reply(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt pk = {}, *p = &pk;
	const struct lbnat_cfg *c = lbnat_config();

	if (parse_ipv4((void *)(long)ctx->data, data_end, p) != PARSE_OK || p->fragment || !c)
		return -1;
	struct iphdr *ip = p->ip;

	if (!lbnat_reply_tuple(c, ip->saddr, p->sport, ip->daddr, p->dport, p->proto))
		return -1;
	struct lbnat_scratch *x = lbnat_scratch();
	int est;
	__u64 now = bpf_ktime_get_coarse_ns();

	if (!x)
		return -1;
	lbnat_set_key(&x->rk, ip->saddr, ip->daddr, p->sport, p->dport, p->proto);
	struct lbnat_session *s = lbnat_find_reply(c, &x->rk, &est, now, &x->fk);

	if (!s) {
		lbnat_count(LBNAT_REV_MISS);
		return pass(XLB_PASS_NO_SERVICE);
	}
	if (ip->ttl <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);

	struct ports *pp;
	__sum16 *check;
	__u8 flags;

	if (lbnat_l4(p, data_end, &pp, &check, &flags))
		return drop(XLB_DROP_MALFORMED_L4);
	/* The reply marks the session answered, and no more: the client's
	 * next packet establishes it (lbnat_establishes). */
	if (p->proto == IPPROTO_TCP && (flags & (XLB_TCP_FIN | XLB_TCP_RST)) &&
	    s->state != LBNAT_CLOSING) {
		lbnat_close(&x->rk, s, est, &x->fk);
		/* The backend closes first: its TIME_WAIT starts now. */
		if ((flags & XLB_TCP_FIN) && !(s->flags & LBNAT_DNAT))
			lbnat_tw_mark(&x->rk, now,
				      lbnat_tw_owner(lbnat_port_hash(
					      xlb_addr_v4(&s->client), xlb_addr_v4(&s->vip),
					      s->client_port, s->vip_port, p->proto)));
	}
	if (!(s->flags & LBNAT_REPLIED))
		s->flags |= LBNAT_REPLIED;
	if (now - s->last > XLB_NAT_TOUCH_NS && (__s64)(now - s->last) > 0)
		s->last = now;

	__be32 client = xlb_addr_v4(&s->client);
	__u16 len = p->ip_len;
	int how = lbnat_next_hop(ctx, &s->nh, client, ip, len, 0, &x->fib);

	if (how < 0)
		return -how - 1;
	if (__builtin_expect(p->options, 0))
		count_reason(XLB_NOTE_IP_OPTIONS);
	lbnat_rewrite(ip, pp, check, xlb_addr_v4(&s->vip), s->vip_port, client, s->client_port);
	lbnat_count(LBNAT_REV);
	return lbnat_emit(ctx, p->eth, &s->nh, how);
}

/* Whether the node has any NAT state at all: a NAT address or dnat
 * backends. One inlined array read for a packet that is no service's. */
static __always_inline int lbnat_on(void)
{
	const struct lbnat_cfg *c = lbnat_config();

	return c && (xlb_addr_v4(&c->addr) | (c->flags & LBNAT_CFG_DNAT));
}

/* Count a first fragment to a NAT service (its ports are there; later
 * fragments have none and count only as drop_fragment). */
static __noinline void lbnat_count_fragment(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt p = {};

	if (parse_ipv4((void *)(long)ctx->data, data_end, &p) != PARSE_OK)
		return;
	struct iphdr *ip = p.ip;
	struct ports *l4 = (void *)ip + ip->ihl * 4;

	if (ip->frag_off & bpf_htons(IP_OFFSET))
		return;
	if ((void *)(l4 + 1) > data_end || (void *)(l4 + 1) > (void *)ip + p.ip_len)
		return;
	struct svc_slot *svc = svc_lookup(ip->daddr, l4->dest, ip->protocol);

	if (svc && (svc->encap == XLB_ENCAP_NAT || svc->encap == XLB_ENCAP_DNAT))
		lbnat_count(LBNAT_FRAGMENT);
}

#endif
