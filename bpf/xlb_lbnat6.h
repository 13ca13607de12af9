/* NAT forwarding for IPv6 services (XLB_ENCAP_NAT and XLB_ENCAP_DNAT on an
 * IPv6 VIP, IPv6 backends only): xlb_lbnat.h's sessions, claims and
 * expiry, with IPv6 keys in the same maps. Full NAT takes its source from
 * node_addr6 and its ports from nat_cfg's range. xlb_lb6 decides that a
 * packet is for this path and says so with one of the codes below, which
 * its caller (xlb_lb6_reply, inlined in xlb_lb) dispatches: called from
 * xlb_lb6 itself, the chain of frames would not fit 512 bytes.
 * docs/decisions/0007-nat-sessions.md ("IPv6") says why. */
#ifndef XLB_LBNAT6_H
#define XLB_LBNAT6_H

/* xlb_lb6's answers for the NAT path. Verdicts are below 256, a deferred
 * Packet Too Big ends in 0xff; these end in 0xfe. */
#define XLB_LB6_NAT 0x1fe            /* TCP or UDP to a NAT or DNAT service */
#define XLB_LB6_NAT_ICMP 0x2fe       /* an ICMPv6 error to such a service's VIP */
#define XLB_LB6_NAT_REPLY 0x3fe      /* TCP or UDP that may be a session's reply */
#define XLB_LB6_NAT_REPLY_ICMP 0x4fe /* an ICMPv6 error that may be about a session's packet */
#define XLB_LB6_NAT_FRAGMENT 0x5fe   /* a fragment to a VIP: counted if a NAT service's, dropped */

static __always_inline int node6_set(void)
{
	return (node_addr6.w[0] | node_addr6.w[1] | node_addr6.w[2] | node_addr6.w[3]) != 0;
}

/* Copy node_addr6 word by word: a struct copy of the volatile constant
 * lets the compiler fold its reads to the initializer. */
static __always_inline void node6_copy(union xlb_addr *a)
{
	a->w[0] = node_addr6.w[0];
	a->w[1] = node_addr6.w[1];
	a->w[2] = node_addr6.w[2];
	a->w[3] = node_addr6.w[3];
}

static __always_inline int is_node6(const __be32 *a)
{
	return !((a[0] ^ node_addr6.w[0]) | (a[1] ^ node_addr6.w[1]) | (a[2] ^ node_addr6.w[2]) |
		 (a[3] ^ node_addr6.w[3]));
}

/* Whether an IPv6 packet to daddr that is no service's may concern a NAT
 * session: addressed to the node's IPv6 address (full NAT's replies), or
 * any while dnat services exist (their replies pass as transit). One
 * array read, as lbnat_on for IPv4. */
static __always_inline int lbnat6_on(const __be32 *daddr)
{
	const struct lbnat_cfg *c = lbnat_config();

	return c && ((c->flags & LBNAT_CFG_DNAT) || (node6_set() && is_node6(daddr)));
}

static __always_inline void lbnat6_addr(union xlb_addr *a, const __be32 *w)
{
	a->w[0] = w[0];
	a->w[1] = w[1];
	a->w[2] = w[2];
	a->w[3] = w[3];
}

static __always_inline void lbnat6_copy(__be32 *to, const __be32 *from)
{
	to[0] = from[0];
	to[1] = from[1];
	to[2] = from[2];
	to[3] = from[3];
}

/* lbnat_set_key for IPv6 addresses (in the packet or a map). */
static __always_inline void lbnat6_set_key(struct lbnat_key *k, const __be32 *src, const __be32 *dst,
					   __be16 sport, __be16 dport, __u8 proto)
{
	lbnat6_addr(&k->src, src);
	lbnat6_addr(&k->dst, dst);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->pad[0] = k->pad[1] = k->pad[2] = 0;
}

/* The checksum diff of an IPv6 address changed from a to b. */
static __always_inline __u32 csum_diff128(const __be32 *a, const __be32 *b)
{
	return csum_diff32(a[0], b[0]) + csum_diff32(a[1], b[1]) + csum_diff32(a[2], b[2]) +
	       csum_diff32(a[3], b[3]);
}

/* lbnat_port_hash over an IPv6 5-tuple: the client's 128 bits through
 * two rounds of the finalizer (as the IPv6 flow hash), the rest through
 * a third, under the NAT's own seed. */
static __always_inline __u64 lbnat_port_hash6(const __be32 *saddr, const __be32 *daddr, __be16 sport,
					      __be16 dport, __u8 proto)
{
	__u64 k = fmix64(((__u64)saddr[0] | ((__u64)saddr[1] << 32)) ^ XLB_NAT_PORT_SEED) ^
		  ((__u64)saddr[2] | ((__u64)saddr[3] << 32));
	__u32 d = daddr[0] ^ daddr[1] ^ daddr[2] ^ daddr[3];

	k = fmix64(k) ^ ((__u32)sport | ((__u32)dport << 16)) ^ ((__u64)d << 32) ^
	    ((__u64)proto << 56);
	return fmix64(k);
}

/* lbnat_l4 for IPv6: ports, checksum and TCP flags of the upper-layer
 * header at p->l4_off, within frame and datagram. A UDP checksum 0 is
 * invalid over IPv6 (RFC 8200 8.1): such a datagram is refused (-1), as
 * a truncated header is. */
static __always_inline int lbnat6_l4(struct pkt6 *p, void *data_end, struct ports **pp,
				     __sum16 **check, __u8 *flags)
{
	__u8 *l4 = (void *)p->ip6 + p->l4_off;
	void *dgram_end = (void *)p->ip6 + p->ip_len;

	if (p->proto == IPPROTO_TCP) {
		if (past_datagram(l4 + 18, dgram_end, data_end))
			return -1;
		*flags = l4[13];
		*check = (void *)(l4 + 16);
	} else {
		if (past_datagram(l4 + 8, dgram_end, data_end))
			return -1;
		*flags = 0;
		*check = (void *)(l4 + 6);
		if (!**check)
			return -1;
	}
	*pp = (void *)l4;
	return 0;
}

/* Rewrite the packet to nsrc:nsport -> ndst:ndport, its transport
 * checksum updated over the pseudo-header's addresses and the ports (IPv6
 * has no header checksum), its hop limit decremented. A computed UDP 0
 * goes out as 0xffff. */
static __always_inline void lbnat6_rewrite(struct ipv6hdr *ip6, __u8 proto, struct ports *pp,
					   __sum16 *check, const __be32 *nsrc, __be16 nsport,
					   const __be32 *ndst, __be16 ndport)
{
	__u32 d = csum_diff128(ip6->saddr, nsrc) + csum_diff128(ip6->daddr, ndst) +
		  csum_diff16(pp->source, nsport) + csum_diff16(pp->dest, ndport);
	__u16 c = csum_apply(*check, d);

	if (proto == IPPROTO_UDP && !c)
		c = 0xffff;
	*check = c;
	lbnat6_copy(ip6->saddr, nsrc);
	lbnat6_copy(ip6->daddr, ndst);
	pp->source = nsport;
	pp->dest = ndport;
	ip6->hop_limit--;
}

/* lbnat_next_hop for IPv6: towards dst from node_addr6. A packet too big
 * for the route is answered with an ICMPv6 Packet Too Big from node_addr6
 * quoting it as it arrived (no router fragments IPv6); an ICMPv6 error
 * too big is dropped. Returns 0, 1 (not resolved: the kernel forwards
 * it) or -(verdict + 1). */
static __always_inline int lbnat6_next_hop(struct xdp_md *ctx, struct nh_entry *nh, const __be32 *dst,
					   __u16 len, int icmp, struct bpf_fib_lookup *fib)
{
	__u64 now = bpf_jiffies64();

	if (nh->gen == nh_gen && len <= nh->max_len && now - nh->stamp < XLB_NH_MAX_AGE)
		return 0;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET6;
	fib->ipv6_src[0] = node_addr6.w[0];
	fib->ipv6_src[1] = node_addr6.w[1];
	fib->ipv6_src[2] = node_addr6.w[2];
	fib->ipv6_src[3] = node_addr6.w[3];
	fib->ipv6_dst[0] = dst[0];
	fib->ipv6_dst[1] = dst[1];
	fib->ipv6_dst[2] = dst[2];
	fib->ipv6_dst[3] = dst[3];
	long rc = nh_lookup(ctx, nh, fib, len);

	if ((rc & 0xff) == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		if (icmp || !node6_set()) {
			count_reason(XLB_DROP_TOO_BIG);
			return -(XDP_DROP + 1);
		}
		if (icmp6_too_big(ctx, &node_addr6, rc >> 8, len)) {
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

/* lbnat_open for an IPv6 service: the backend from the service's table
 * (an IPv6 one: the control plane gives NAT services backends of their
 * VIP's family), the claim on node_addr6 and a free port (nat) or on the
 * client's own tuple (dnat). Out of line, as lbnat_open. */
static __noinline int lbnat_open6(struct lbnat_scratch *x, const struct svc_slot *svc, __u32 hash,
				  __u64 now, int tcp)
{
	const struct lbnat_key *fk = &x->fk;
	const struct lbnat_cfg *c = lbnat_config();
	int dnat = svc->encap == XLB_ENCAP_DNAT;
	xlb_table_entry *e = table_entry(svc->id, flow_slot(hash));

	if (!c)
		return XLB_DROP_NAT_NO_PORT;
	__builtin_memset(&x->s, 0, sizeof(x->s));
	if (!e || entry_backend(*e, &x->s.backend_id, &x->rk.src) || xlb_addr_is4(&x->rk.src))
		return XLB_DROP_NO_BACKEND;
	struct backend *b = bpf_map_lookup_elem(&backends, &x->s.backend_id);
	if (!b)
		return XLB_DROP_NO_BACKEND;
	__be16 bport = b->port ? b->port : fk->dport;

	x->range = 0;
	x->ok = 0;
	x->strict = 0;
	x->rk.sport = bport;
	x->rk.proto = fk->proto;
	x->rk.pad[0] = x->rk.pad[1] = x->rk.pad[2] = 0;
	if (dnat) {
		x->rk.dst = fk->src;
		x->rk.dport = fk->sport;
	} else {
		if (!node6_set() || c->port_max < c->port_min) {
			lbnat_count(LBNAT_ALLOC_FAILED);
			return XLB_DROP_NAT_NO_PORT;
		}
		node6_copy(&x->rk.dst);
		x->rk.dport = 0;
		x->range = (__u32)c->port_max - c->port_min + 1;
		x->h = lbnat_port_hash6(fk->src.w, fk->dst.w, fk->sport, fk->dport, fk->proto);
	}
	return lbnat_claim(x, c, bport, now, dnat, tcp);
}

/* ---- Client to backend ---- */

/* xlb_lb_nat for IPv6 (XLB_LB6_NAT): the same session rules, the packet
 * parsed and its service looked up again (xlb_lb6 could not call this
 * with its own frame on the stack). */
static __noinline int xlb_lb6_nat(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 p = {};
	const struct lbnat_cfg *c = lbnat_config();
	struct lbnat_scratch *x = lbnat_scratch();

	if (parse_ipv6((void *)(long)ctx->data + sizeof(struct ethhdr), data_end, &p) != PARSE6_OK ||
	    !c || !x)
		return drop(XLB_DROP_NAT_NO_PORT);
	struct ipv6hdr *ip6 = p.ip6;
	struct svc_slot *svc = svc_lookup6(ip6->daddr, p.dport, p.proto);

	if (!svc)
		return drop(XLB_DROP_VIP_NO_SERVICE);
	struct ports *pp;
	__sum16 *check;
	__u8 flags;

	if (lbnat6_l4(&p, data_end, &pp, &check, &flags))
		return drop(XLB_DROP_MALFORMED_L4);
	int tcp = p.proto == IPPROTO_TCP;
	int syn = tcp && (flags & (XLB_TCP_SYN | XLB_TCP_ACK)) == XLB_TCP_SYN;
	__u32 bid;
	__u64 now = bpf_ktime_get_coarse_ns();

	lbnat6_set_key(&x->fk, ip6->saddr, ip6->daddr, p.sport, p.dport, p.proto);
	/* The flow hash is computed again for a new session rather than
	 * kept: a value live across the session's lookup costs this frame
	 * stack the call chain does not have. */
	x->bid = 0;
	if (syn)
		lbnat_pick_now(x, svc,
			       xlb_flow_hash6(ip6->saddr, ip6->daddr,
					      hashed_sport(p.sport, svc->flags), p.dport, p.proto));
	const struct lbnat_key *rk = lbnat_session_of(x, c, flags, tcp, syn, now, &bid);

	if (!rk) {
		if (tcp && !syn)
			return drop(XLB_DROP_NAT_NO_SESSION);
		__u32 hash = xlb_flow_hash6(ip6->saddr, ip6->daddr, hashed_sport(p.sport, svc->flags),
					    p.dport, p.proto);
		int why = lbnat_open6(x, svc, hash, now, tcp);

		if (why)
			return drop(why);
		bid = x->s.backend_id;
		rk = &x->rk;
	}

	struct backend_state *bst = lbnat_backend(rk, bid, svc->id, p.dport);
	struct nh_entry *nh = &x->nh;

	if (bst)
		nh = &bst->nh;
	else
		x->nh.gen = 0;
	__u16 len = p.ip_len;
	int how = lbnat6_next_hop(ctx, nh, rk->src.w, len, 0, &x->fib);

	if (how < 0)
		return -how - 1;
	lbnat6_rewrite(ip6, p.proto, pp, check, rk->dst.w, rk->dport, rk->src.w, rk->sport);
	if (bst) {
		bst->stats.packets++;
		bst->stats.bytes += len;
	}
	lbnat_count(LBNAT_FWD);
	return lbnat_emit(ctx, (void *)ip6 - sizeof(struct ethhdr), nh, how);
}

/* Rewrite an ICMPv6 error's addresses (outer: to nsrc -> ndst) and its
 * quote's (to qsrc:qsport -> qdst:qdport), the ICMPv6 checksum updated
 * over both (its pseudo-header has the outer addresses), the hop limit
 * decremented. The quoted transport checksum is left alone, as for IPv4:
 * no stack reads it in an error. */
static __always_inline void lbnat6_icmp_rewrite(struct ipv6hdr *ip6, __sum16 *icheck,
						struct ipv6hdr *q, struct ports *qp,
						const __be32 *nsrc, const __be32 *ndst,
						const __be32 *qsrc, __be16 qsport,
						const __be32 *qdst, __be16 qdport)
{
	__u32 d = csum_diff128(ip6->saddr, nsrc) + csum_diff128(ip6->daddr, ndst) +
		  csum_diff128(q->saddr, qsrc) + csum_diff128(q->daddr, qdst) +
		  csum_diff16(qp->source, qsport) + csum_diff16(qp->dest, qdport);

	*icheck = csum_apply(*icheck, d);
	lbnat6_copy(q->saddr, qsrc);
	lbnat6_copy(q->daddr, qdst);
	qp->source = qsport;
	qp->dest = qdport;
	lbnat6_copy(ip6->saddr, nsrc);
	lbnat6_copy(ip6->daddr, ndst);
	ip6->hop_limit--;
}

/* xlb_lb_nat_icmp for IPv6 (XLB_LB6_NAT_ICMP): an ICMPv6 error to the VIP
 * about a reply of a session's backend goes to that backend, about its
 * own packet (backend:port -> node_addr6:port, or -> client for dnat),
 * and for nat from node_addr6. */
static __noinline int xlb_lb6_nat_icmp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 p = {};
	const struct lbnat_cfg *c = lbnat_config();
	struct lbnat_scratch *x = lbnat_scratch();

	if (parse_ipv6(data + sizeof(struct ethhdr), data_end, &p) !=
		    PARSE6_NOT_TCP_UDP ||
	    parse_icmp6_error(&p, data_end) || !c || !x)
		return drop(XLB_DROP_NAT_NO_SESSION);
	struct ipv6hdr *ip6 = p.ip6;
	__u8 *icmp = (void *)ip6 + p.l4_off;
	struct ipv6hdr *q = (void *)(icmp + 8);
	struct ports *qp = (void *)(q + 1);
	struct lbnat_fwd *f;
	int est;

	/* parse_icmp6_error checked these; the verifier wants them again. */
	if ((void *)(qp + 1) > data_end)
		return drop(XLB_DROP_MALFORMED_L4);
	lbnat6_set_key(&x->fk, p.flow_src, ip6->daddr, p.sport, p.dport, p.proto);
	struct lbnat_session *s = lbnat_find(&x->fk, &x->rk, &est, &f);
	if (!s)
		return drop(XLB_DROP_NAT_NO_SESSION);
	if (lbnat_expired(c, s, bpf_ktime_get_coarse_ns())) {
		lbnat_reap(&x->rk, s, est, &x->fk);
		return drop(XLB_DROP_NAT_NO_SESSION);
	}
	struct lbnat_key *rk = &x->rk;
	/* Errors are rare: their next hop comes from the FIB every time
	 * (generation 0), which spares this path the service's lookup and
	 * its stack, which the call chain does not have. */
	struct nh_entry *nh = &x->nh;

	x->nh.gen = 0;
	int how = lbnat6_next_hop(ctx, nh, rk->src.w, p.ip_len, 1, &x->fib);

	if (how < 0)
		return -how - 1;
	/* The outer source: the router's for dnat (the backend's route back
	 * to the client passes the node), node_addr6 for nat (the backend
	 * may have no route to the router). In the scratch's tmp key. */
	if (s->flags & LBNAT_DNAT)
		lbnat6_addr(&x->tmp.src, ip6->saddr);
	else
		node6_copy(&x->tmp.src);
	lbnat6_icmp_rewrite(ip6, (void *)(icmp + 2), q, qp, x->tmp.src.w, rk->src.w, rk->src.w,
			    rk->sport, rk->dst.w, rk->dport);
	lbnat_count(LBNAT_ICMP);
	count_reason(XLB_NOTE_ICMP_TO_BACKEND);
	return lbnat_emit(ctx, data, nh, how);
}

/* ---- Backend to client ---- */

/* lbnat_reply_tuple for IPv6: the node's IPv6 address and the allocated
 * range, or a dnat backend's address, port and protocol. bk is room for
 * the dnat backend's key. */
static __always_inline int lbnat6_reply_tuple(const struct lbnat_cfg *c, const __be32 *saddr,
					      __be16 sport, const __be32 *daddr, __be16 dport,
					      __u8 proto, struct lbnat_be_key *bk)
{
	if (node6_set() && is_node6(daddr)) {
		__u16 port = bpf_ntohs(dport);

		if (port >= c->port_min && port <= c->port_max)
			return 1;
	}
	if (c->flags & LBNAT_CFG_DNAT) {
		lbnat6_addr(&bk->addr, saddr);
		bk->port = sport;
		bk->proto = proto;
		bk->pad = 0;
		return bpf_map_lookup_elem(&nat_dnat_be, bk) != 0;
	}
	return 0;
}

/* xlb_lb_nat_reply for IPv6 (XLB_LB6_NAT_REPLY): a backend's reply,
 * rewritten to come from VIP:port and go to the client. What is no
 * session's passes, as it would have without NAT. */
static __noinline int xlb_lb6_nat_reply(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 p = {};
	const struct lbnat_cfg *c = lbnat_config();
	struct lbnat_scratch *x = lbnat_scratch();

	if (parse_ipv6(data + sizeof(struct ethhdr), data_end, &p) != PARSE6_OK ||
	    !c || !x)
		return pass(XLB_PASS_NO_SERVICE);
	struct ipv6hdr *ip6 = p.ip6;

	if (!lbnat6_reply_tuple(c, ip6->saddr, p.sport, ip6->daddr, p.dport, p.proto, &x->bk))
		return pass(XLB_PASS_NO_SERVICE);
	int est;
	__u64 now = bpf_ktime_get_coarse_ns();

	lbnat6_set_key(&x->rk, ip6->saddr, ip6->daddr, p.sport, p.dport, p.proto);
	struct lbnat_session *s = lbnat_find_reply(c, &x->rk, &est, now, &x->fk);

	if (!s) {
		lbnat_count(LBNAT_REV_MISS);
		return pass(XLB_PASS_NO_SERVICE);
	}
	if (ip6->hop_limit <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);
	struct ports *pp;
	__sum16 *check;
	__u8 flags;

	if (lbnat6_l4(&p, data_end, &pp, &check, &flags))
		return drop(XLB_DROP_MALFORMED_L4);
	if (p.proto == IPPROTO_TCP && (flags & (XLB_TCP_FIN | XLB_TCP_RST)) &&
	    s->state != LBNAT_CLOSING) {
		lbnat_close(&x->rk, s, est, &x->fk);
		/* The backend closes first: its TIME_WAIT starts now. */
		if ((flags & XLB_TCP_FIN) && !(s->flags & LBNAT_DNAT))
			lbnat_tw_mark(&x->rk, now,
				      lbnat_tw_owner(lbnat_port_hash6(s->client.w, s->vip.w,
								      s->client_port, s->vip_port,
								      p.proto)));
	}
	if (!(s->flags & LBNAT_REPLIED))
		s->flags |= LBNAT_REPLIED;
	if (now - s->last > XLB_NAT_TOUCH_NS && (__s64)(now - s->last) > 0)
		s->last = now;

	__u16 len = p.ip_len;
	int how = lbnat6_next_hop(ctx, &s->nh, s->client.w, len, 0, &x->fib);

	if (how < 0)
		return -how - 1;
	lbnat6_rewrite(ip6, p.proto, pp, check, s->vip.w, s->vip_port, s->client.w, s->client_port);
	lbnat_count(LBNAT_REV);
	return lbnat_emit(ctx, data, &s->nh, how);
}

/* xlb_lb_nat_reply_icmp for IPv6 (XLB_LB6_NAT_REPLY_ICMP): an ICMPv6
 * error about a packet this node sent a backend (Packet Too Big on the
 * way to it, port unreachable from it, ...), addressed to node_addr6 or,
 * for dnat, to the client, goes to the client about its own packet,
 * client:port -> VIP:port, from the VIP. Anything else passes. */
static __noinline int xlb_lb6_nat_reply_icmp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 p = {};
	const struct lbnat_cfg *c = lbnat_config();
	struct lbnat_scratch *x = lbnat_scratch();

	if (parse_ipv6(data + sizeof(struct ethhdr), data_end, &p) !=
		    PARSE6_NOT_TCP_UDP ||
	    p.nexthdr != IPPROTO_ICMPV6 || !c || !x)
		return pass(XLB_PASS_NOT_TCP_UDP);
	struct ipv6hdr *ip6 = p.ip6;
	void *dgram_end = (void *)ip6 + p.ip_len;
	__u8 *icmp = (void *)ip6 + p.l4_off;
	struct ipv6hdr *q = (void *)(icmp + 8);
	struct ports *qp = (void *)(q + 1);

	if (past_datagram(qp + 1, dgram_end, data_end))
		return pass(XLB_PASS_NOT_TCP_UDP);
	if (icmp[0] < ICMPV6_DEST_UNREACH || icmp[0] > ICMPV6_PARAMPROB)
		return pass(XLB_PASS_NOT_TCP_UDP);
	if (q->nexthdr != IPPROTO_TCP && q->nexthdr != IPPROTO_UDP)
		return pass(XLB_PASS_NOT_TCP_UDP);
	/* The quoted packet went node -> backend: its reply's key is the
	 * quote turned around. */
	if (!lbnat6_reply_tuple(c, q->daddr, qp->dest, q->saddr, qp->source, q->nexthdr, &x->bk))
		return pass(XLB_PASS_NOT_TCP_UDP);
	int est;

	lbnat6_set_key(&x->rk, q->daddr, q->saddr, qp->dest, qp->source, q->nexthdr);
	struct lbnat_session *s =
		lbnat_find_reply(c, &x->rk, &est, bpf_ktime_get_coarse_ns(), &x->fk);

	if (!s) {
		lbnat_count(LBNAT_REV_MISS);
		return pass(XLB_PASS_NOT_TCP_UDP);
	}
	if (ip6->hop_limit <= 1)
		return pass(XLB_PASS_TTL_EXCEEDED);
	int how = lbnat6_next_hop(ctx, &s->nh, s->client.w, p.ip_len, 1, &x->fib);

	if (how < 0)
		return -how - 1;
	lbnat6_icmp_rewrite(ip6, (void *)(icmp + 2), q, qp, s->vip.w, s->client.w, s->client.w,
			    s->client_port, s->vip.w, s->vip_port);
	lbnat_count(LBNAT_ICMP);
	return lbnat_emit(ctx, data, &s->nh, how);
}

/* Count a first fragment to an IPv6 NAT service (XLB_LB6_NAT_FRAGMENT;
 * the caller drops it): its fragment header is followed by TCP or UDP
 * with the ports. Later fragments count only as drop_fragment. */
static __noinline void lbnat6_count_fragment(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 p = {};

	if (parse_ipv6(data + sizeof(struct ethhdr), data_end, &p) !=
	    PARSE6_FRAGMENT)
		return;
	__u8 *fh = (void *)p.ip6 + p.l4_off;
	struct ports *l4 = (void *)(fh + 8);

	if (past_datagram(l4 + 1, (void *)p.ip6 + p.ip_len, data_end))
		return;
	/* Fragment offset (13 bits, above 3 flag bits) 0: the first. */
	if ((fh[2] | (fh[3] & 0xf8)) || (fh[0] != IPPROTO_TCP && fh[0] != IPPROTO_UDP))
		return;
	struct svc_slot *svc = svc_lookup6(p.ip6->daddr, l4->dest, fh[0]);

	if (svc && (svc->encap == XLB_ENCAP_NAT || svc->encap == XLB_ENCAP_DNAT))
		lbnat_count(LBNAT_FRAGMENT);
}

/* The NAT path's share of xlb_lb6's answers (the codes above). */
static __always_inline int xlb_lb6_nat_dispatch(struct xdp_md *ctx, int v)
{
	switch (v) {
	case XLB_LB6_NAT:
		return xlb_lb6_nat(ctx);
	case XLB_LB6_NAT_ICMP:
		return xlb_lb6_nat_icmp(ctx);
	case XLB_LB6_NAT_REPLY:
		return xlb_lb6_nat_reply(ctx);
	case XLB_LB6_NAT_REPLY_ICMP:
		return xlb_lb6_nat_reply_icmp(ctx);
	}
	/* XLB_LB6_NAT_FRAGMENT */
	lbnat6_count_fragment(ctx);
	return drop(XLB_DROP_FRAGMENT);
}

#endif
