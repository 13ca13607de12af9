/* Kubernetes mode of the backend program: pods know nothing of the VIP, so
 * the node translates VIP:port -> pod:targetPort on the way in (XDP, after
 * decapsulation: nat_forward) and pod:targetPort -> VIP:port on the way
 * out (TC egress on the same interface: nat_reply). The maps are in
 * xlb_backend_maps.h, the programs in xlb_backend.c.
 * docs/kubernetes-datapath.md explains the design. */
#ifndef XLB_NAT_H
#define XLB_NAT_H

#include "xlb_backend_maps.h"

#define ICMP_TIME_EXCEEDED_TYPE 11
#define ICMP_PARAMETERPROB_TYPE 12

static __always_inline void nat_count(__u32 stat, __u64 bytes)
{
	struct xlb_counter *c = bpf_map_lookup_elem(&nat_stats, &stat);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* Remember the flow k for its replies, which leave as v. A lookup
 * refreshes an LRU entry, so only a missing or changed record costs an
 * update. */
static __always_inline void nat_record_flow(struct nat_flow_key *k, struct nat_vip *v)
{
	struct nat_vip *cur = bpf_map_lookup_elem(&nat_flows, k);

	if (cur && xlb_addr_eq(&cur->vip, &v->vip) && cur->port == v->port)
		return;
	if (bpf_map_update_elem(&nat_flows, k, v, BPF_ANY))
		nat_count(NAT_NOTE_FLOW_FAILED, 0);
}

static __always_inline void nat_record(__be32 pod, __be16 target_port, __be32 client,
				       __be16 client_port, __u8 proto, __be32 vip, __be16 port)
{
	struct nat_flow_key k = {
		.pod = XLB_ADDR4(pod), .client = XLB_ADDR4(client), .pod_port = target_port,
		.client_port = client_port, .proto = proto,
	};
	struct nat_vip v = {.vip = XLB_ADDR4(vip), .port = port};

	nat_record_flow(&k, &v);
}

/* An IPv4-mapped address in an IPv6 header stands for no IPv6 host: as
 * the maps hold IPv4 addresses in that form, it must match nothing. */
static __always_inline int addr6_is_mapped(const union xlb_addr *a)
{
	return !a->w[0] && !a->w[1] && a->w[2] == bpf_htonl(0xffff);
}

static __always_inline int addr6_eq(const __be32 *a, const __be32 *b)
{
	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]));
}

/* The checksum difference (csum_apply's diff) of an IPv6 address from
 * becoming to. */
static __always_inline __u32 csum_diff128(const __be32 *from, const __be32 *to)
{
	return csum_diff32(from[0], to[0]) + csum_diff32(from[1], to[1]) +
	       csum_diff32(from[2], to[2]) + csum_diff32(from[3], to[3]);
}

/* An ICMP error that a client-side router sent to the VIP about a reply
 * (fragmentation needed, above all), tunnelled here by the LB: the quoted
 * reply left the node as VIP:port -> client, so the pod must see it as
 * podIP:targetPort -> client, and the error as addressed to the pod.
 * The quoted transport checksum is left alone: no stack checks it. len is
 * the ICMP message's length in the inner datagram: what lies past it in
 * the frame (Ethernet padding) is not the quote's, and is neither read
 * nor written. */
static __always_inline int nat_forward_icmp(void *data_end, struct iphdr *inner, __u8 *icmp,
					    __u32 len, __be32 pod)
{
	struct iphdr *q;
	struct ports *qp;
	__u32 qihl;

	if ((void *)(icmp + 8) > data_end || len < 8)
		return NAT_DROP_MALFORMED;
	if (icmp[0] != ICMP_DEST_UNREACH && icmp[0] != ICMP_TIME_EXCEEDED_TYPE &&
	    icmp[0] != ICMP_PARAMETERPROB_TYPE)
		return NAT_DROP_PROTO;
	q = (void *)(icmp + 8);
	if ((void *)(q + 1) > data_end || len < 8 + sizeof(*q) || q->version != 4 || q->ihl < 5)
		return NAT_DROP_MALFORMED;
	if (q->saddr != inner->daddr ||
	    (q->protocol != IPPROTO_TCP && q->protocol != IPPROTO_UDP))
		return NAT_DROP_PROTO;
	qihl = q->ihl * 4;
	qp = (void *)q + qihl;
	if ((void *)(qp + 1) > data_end || len < 8 + qihl + sizeof(*qp))
		return NAT_DROP_MALFORMED;

	struct nat_svc_key k = {
		.vip = XLB_ADDR4(q->saddr), .pod = XLB_ADDR4(pod), .port = qp->source, .proto = q->protocol,
	};
	__be16 *tp = bpf_map_lookup_elem(&nat_svcs, &k);
	if (!tp)
		return NAT_DROP_NO_ENTRY;
	__be16 target = *tp;

	__u32 d = csum_diff32(inner->daddr, pod);
	__u16 qcheck = csum_apply(q->check, d);
	__u32 icmp_d = d + csum_diff16(q->check, qcheck) + csum_diff16(qp->source, target);
	__sum16 *icheck = (void *)(icmp + 2);

	inner->check = csum_apply(inner->check, d);
	inner->daddr = pod;
	q->check = qcheck;
	q->saddr = pod;
	qp->source = target;
	*icheck = csum_apply(*icheck, icmp_d);
	return NAT_FWD_ICMP;
}

/* Translate the inner packet of a tunnel to local pod `pod`, in place:
 * destination VIP:port becomes pod:targetPort, the checksums follow, and
 * the flow is recorded for its replies. Returns NAT_FWD or NAT_FWD_ICMP
 * when the packet may go on, a NAT_DROP_* reason otherwise. */
static __always_inline int nat_forward(void *data_end, struct iphdr *inner, __be32 pod)
{
	__u32 ihl, tot, off;
	void *l4;

	if ((void *)(inner + 1) > data_end || inner->version != 4 || inner->ihl < 5)
		return NAT_DROP_MALFORMED;
	ihl = inner->ihl * 4;
	tot = bpf_ntohs(inner->tot_len);
	if (tot < ihl || (void *)inner + tot > data_end)
		return NAT_DROP_MALFORMED;
	if (inner->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return NAT_DROP_FRAGMENT;
	l4 = (void *)inner + ihl;
	if (inner->protocol == IPPROTO_ICMP)
		return nat_forward_icmp(data_end, inner, l4, tot - ihl, pod);
	off = l4_csum_off(inner->protocol);
	if (!off)
		return NAT_DROP_PROTO;
	/* TCP and UDP: the ports and the checksum field, inside the frame
	 * and inside the datagram. */
	struct ports *p = l4;
	__sum16 *check = l4 + off;
	if ((void *)(p + 1) > data_end || (void *)(check + 1) > data_end || off + 2 > tot - ihl)
		return NAT_DROP_MALFORMED;

	struct nat_svc_key k = {
		.vip = XLB_ADDR4(inner->daddr), .pod = XLB_ADDR4(pod), .port = p->dest, .proto = inner->protocol,
	};
	__be16 *tp = bpf_map_lookup_elem(&nat_svcs, &k);
	if (!tp)
		return NAT_DROP_NO_ENTRY;
	__be16 target = *tp;

	nat_record(pod, target, inner->saddr, p->source, inner->protocol, inner->daddr, p->dest);

	__u32 d = csum_diff32(inner->daddr, pod);
	/* UDP checksum 0 means none: it stays 0, and a computed 0 is sent
	 * as 0xffff (RFC 768). */
	if (inner->protocol == IPPROTO_TCP || *check) {
		__u16 c = csum_apply(*check, d + csum_diff16(p->dest, target));

		if (c == 0 && inner->protocol == IPPROTO_UDP)
			c = 0xffff;
		*check = c;
	}
	inner->check = csum_apply(inner->check, d);
	inner->daddr = pod;
	p->dest = target;
	return NAT_FWD;
}

/* nat_forward_icmp for IPv6: an ICMPv6 error to the VIP about a reply
 * (Packet Too Big, above all), the quote VIP:port -> client. The pod must
 * see it addressed to itself about podIP:targetPort -> client. The
 * ICMPv6 checksum covers the pseudo-header, so the new destination enters
 * it twice (there and in the quote). */
static __always_inline int nat_forward_icmp6(void *data_end, struct ipv6hdr *inner, __u8 *icmp,
					     __u32 len, const union xlb_addr *pod)
{
	struct ipv6hdr *q;
	struct ports *qp;

	if ((void *)(icmp + 8) > data_end || len < 8)
		return NAT_DROP_MALFORMED;
	if (icmp[0] != ICMPV6_DEST_UNREACH && icmp[0] != ICMPV6_PKT_TOOBIG &&
	    icmp[0] != ICMPV6_TIME_EXCEED && icmp[0] != ICMPV6_PARAMPROB)
		return NAT_DROP_PROTO;
	q = (void *)(icmp + 8);
	qp = (void *)(q + 1);
	if ((void *)(qp + 1) > data_end || len < 8 + sizeof(*q) + sizeof(*qp) || ipv6_version(q) != 6)
		return NAT_DROP_MALFORMED;
	if (!addr6_eq(q->saddr, inner->daddr) ||
	    (q->nexthdr != IPPROTO_TCP && q->nexthdr != IPPROTO_UDP))
		return NAT_DROP_PROTO;

	struct nat_svc_key k = {.pod = *pod, .port = qp->source, .proto = q->nexthdr};
	__builtin_memcpy(k.vip.w, q->saddr, sizeof(k.vip.w));
	__be16 *tp = bpf_map_lookup_elem(&nat_svcs, &k);
	if (!tp)
		return NAT_DROP_NO_ENTRY;
	__be16 target = *tp;

	__u32 d = csum_diff128(inner->daddr, pod->w);
	__sum16 *icheck = (void *)(icmp + 2);

	*icheck = csum_apply(*icheck, d + d + csum_diff16(qp->source, target));
	__builtin_memcpy(inner->daddr, pod->w, sizeof(pod->w));
	__builtin_memcpy(q->saddr, pod->w, sizeof(pod->w));
	qp->source = target;
	return NAT_FWD_ICMP;
}

/* The same for an IPv6 packet of inner_len bytes tunnelled to IPv6 pod
 * *pod: TCP or UDP right after the fixed header (IPv6 has no header
 * checksum; the transport one covers the addresses), or an ICMPv6 error
 * about a reply. Anything behind extension headers, and other ICMPv6, is
 * not translated: dropped as nat_drop_proto (a fragment as
 * nat_drop_fragment). */
static __always_inline int nat_forward6(void *data_end, struct ipv6hdr *inner, __u32 inner_len,
					const union xlb_addr *pod)
{
	__u32 off;

	if ((void *)(inner + 1) > data_end)
		return NAT_DROP_MALFORMED;
	if (inner->nexthdr == IPPROTO_FRAGMENT)
		return NAT_DROP_FRAGMENT;
	if (inner->nexthdr == IPPROTO_ICMPV6)
		return nat_forward_icmp6(data_end, inner, (void *)(inner + 1), inner_len - sizeof(*inner),
					 pod);
	off = l4_csum_off(inner->nexthdr);
	if (!off)
		return NAT_DROP_PROTO;
	struct ports *p = (void *)(inner + 1);
	__sum16 *check = (void *)p + off;
	if ((void *)(p + 1) > data_end || (void *)(check + 1) > data_end ||
	    sizeof(*inner) + off + 2 > inner_len)
		return NAT_DROP_MALFORMED;

	struct nat_svc_key k = {.pod = *pod, .port = p->dest, .proto = inner->nexthdr};
	__builtin_memcpy(k.vip.w, inner->daddr, sizeof(k.vip.w));
	__be16 *tp = bpf_map_lookup_elem(&nat_svcs, &k);
	if (!tp)
		return NAT_DROP_NO_ENTRY;
	__be16 target = *tp;

	struct nat_flow_key fk = {
		.pod = *pod, .pod_port = target, .client_port = p->source, .proto = inner->nexthdr,
	};
	struct nat_vip v = {.vip = k.vip, .port = p->dest};
	__builtin_memcpy(fk.client.w, inner->saddr, sizeof(fk.client.w));
	nat_record_flow(&fk, &v);

	/* A UDP checksum of 0 stays 0: the stack drops it over IPv6 as it
	 * would have without the translation. */
	if (inner->nexthdr == IPPROTO_TCP || *check) {
		__u16 c = csum_apply(*check, csum_diff128(inner->daddr, pod->w) +
						     csum_diff16(p->dest, target));

		if (c == 0 && inner->nexthdr == IPPROTO_UDP)
			c = 0xffff;
		*check = c;
	}
	__builtin_memcpy(inner->daddr, pod->w, sizeof(pod->w));
	p->dest = target;
	return NAT_FWD;
}

/* ---- The way out: TC egress ---- */

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
static __always_inline int nat_reply_lookup_addr(const union xlb_addr *pod, __be16 pod_port,
						 const union xlb_addr *client, __be16 client_port,
						 __u8 proto, struct nat_vip *out, __u32 *stat)
{
	struct nat_flow_key fk = {
		.pod = *pod, .client = *client, .pod_port = pod_port,
		.client_port = client_port, .proto = proto,
	};
	struct nat_rev_key rk = {.pod = *pod, .pod_port = pod_port, .proto = proto};
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

static __always_inline int nat_reply_lookup(__be32 pod, __be16 pod_port, __be32 client,
					    __be16 client_port, __u8 proto, struct nat_vip *out,
					    __u32 *stat)
{
	union xlb_addr p = XLB_ADDR4(pod), c = XLB_ADDR4(client);

	return nat_reply_lookup_addr(&p, pod_port, &c, client_port, proto, out, stat);
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
	    !lookup_addr4(&nat_pods, q.daddr))
		return TC_NEXT;
	qpoff = qoff + q.ihl * 4;
	if (bpf_skb_load_bytes(skb, qpoff, &qp, sizeof(qp)))
		return TC_NEXT;
	if (nat_reply_lookup(q.daddr, qp.dest, q.saddr, qp.source, q.protocol, &v, &stat)) {
		nat_count(NAT_REV_UNTRACKED, 0);
		return TC_NEXT;
	}

	__be32 vip = xlb_addr_v4(&v.vip);
	__u16 qcheck = csum_apply(q.check, csum_diff32(q.daddr, vip));
	if (bpf_l4_csum_replace(skb, icsum, q.daddr, vip, sizeof(vip)) ||
	    bpf_l4_csum_replace(skb, icsum, q.check, qcheck, sizeof(qcheck)) ||
	    bpf_l4_csum_replace(skb, icsum, qp.dest, v.port, sizeof(v.port)) ||
	    bpf_skb_store_bytes(skb, qoff + offsetof(struct iphdr, check), &qcheck, sizeof(qcheck), 0) ||
	    bpf_skb_store_bytes(skb, qoff + offsetof(struct iphdr, daddr), &vip, sizeof(vip), 0) ||
	    bpf_skb_store_bytes(skb, qpoff + offsetof(struct ports, dest), &v.port, sizeof(v.port), 0))
		goto fail;
	if (ip->saddr == q.daddr &&
	    (bpf_l3_csum_replace(skb, IP_CHECK_OFF, ip->saddr, vip, sizeof(vip)) ||
	     bpf_skb_store_bytes(skb, IP_SADDR_OFF, &vip, sizeof(vip), 0)))
		goto fail;
	nat_count(NAT_REV_ICMP, bpf_ntohs(ip->tot_len));
	return TC_NEXT;
fail:
	nat_count(NAT_REV_DROP_WRITE, 0);
	return TC_SHOT;
}

/* nat_reply_icmp for IPv6: an ICMPv6 error leaving the node about a
 * translated packet, the quote client -> pod:targetPort, becomes one
 * about client -> VIP:port; its source too when the pod sent it. */
static __always_inline int nat_reply_icmp6(struct __sk_buff *skb, struct ipv6hdr *ip)
{
	struct {
		__u8 type;
		__u8 code;
		__sum16 check;
		__u32 rest;
	} icmp;
	struct ipv6hdr q;
	struct ports qp;
	struct nat_vip v;
	union xlb_addr pod, client;
	__u32 l4off = ETH_HLEN + sizeof(*ip), qoff = l4off + sizeof(icmp), qpoff = qoff + sizeof(q);
	__u32 icsum = l4off + 2, stat;
	__s64 diff;

	if (bpf_skb_load_bytes(skb, l4off, &icmp, sizeof(icmp)) ||
	    (icmp.type != ICMPV6_DEST_UNREACH && icmp.type != ICMPV6_PKT_TOOBIG &&
	     icmp.type != ICMPV6_TIME_EXCEED && icmp.type != ICMPV6_PARAMPROB))
		return TC_NEXT;
	if (bpf_skb_load_bytes(skb, qoff, &q, sizeof(q)) || ipv6_version(&q) != 6 ||
	    (q.nexthdr != IPPROTO_TCP && q.nexthdr != IPPROTO_UDP))
		return TC_NEXT;
	__builtin_memcpy(pod.w, q.daddr, sizeof(pod.w));
	if (addr6_is_mapped(&pod) || !bpf_map_lookup_elem(&nat_pods, &pod) ||
	    bpf_skb_load_bytes(skb, qpoff, &qp, sizeof(qp)))
		return TC_NEXT;
	__builtin_memcpy(client.w, q.saddr, sizeof(client.w));
	if (nat_reply_lookup_addr(&pod, qp.dest, &client, qp.source, q.nexthdr, &v, &stat)) {
		nat_count(NAT_REV_UNTRACKED, 0);
		return TC_NEXT;
	}
	diff = bpf_csum_diff(pod.w, sizeof(pod.w), v.vip.w, sizeof(v.vip.w), 0);
	if (diff < 0 || bpf_l4_csum_replace(skb, icsum, 0, diff, 0) ||
	    bpf_l4_csum_replace(skb, icsum, qp.dest, v.port, sizeof(v.port)) ||
	    bpf_skb_store_bytes(skb, qoff + offsetof(struct ipv6hdr, daddr), v.vip.w, sizeof(v.vip.w), 0) ||
	    bpf_skb_store_bytes(skb, qpoff + offsetof(struct ports, dest), &v.port, sizeof(v.port), 0))
		goto fail;
	if (addr6_eq(ip->saddr, pod.w) &&
	    (bpf_l4_csum_replace(skb, icsum, 0, diff, BPF_F_PSEUDO_HDR) ||
	     bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, saddr), v.vip.w,
				 sizeof(v.vip.w), 0)))
		goto fail;
	nat_count(NAT_REV_ICMP, sizeof(*ip) + bpf_ntohs(ip->payload_len));
	return TC_NEXT;
fail:
	nat_count(NAT_REV_DROP_WRITE, 0);
	return TC_SHOT;
}

/* The reply of an IPv6 pod: TCP or UDP right after the fixed header, or
 * an ICMPv6 error about a translated packet (anything else leaves
 * untouched). */
static __always_inline int nat_reply6(struct __sk_buff *skb)
{
	struct ipv6hdr ip;
	struct ports p;
	struct nat_vip v;
	union xlb_addr pod, client;
	__u32 l4off = ETH_HLEN + sizeof(ip), csum, stat;
	__s64 diff;
	__u64 udp;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) || ipv6_version(&ip) != 6)
		return TC_NEXT;
	if (ip.nexthdr == IPPROTO_ICMPV6)
		return nat_reply_icmp6(skb, &ip);
	if (ip.nexthdr != IPPROTO_TCP && ip.nexthdr != IPPROTO_UDP && ip.nexthdr != IPPROTO_FRAGMENT)
		return TC_NEXT;
	__builtin_memcpy(pod.w, ip.saddr, sizeof(pod.w));
	if (addr6_is_mapped(&pod) || !bpf_map_lookup_elem(&nat_pods, &pod))
		return TC_NEXT;
	if (ip.nexthdr == IPPROTO_FRAGMENT) {
		nat_count(NAT_REV_FRAGMENT, 0);
		return TC_NEXT;
	}
	csum = l4off + l4_csum_off(ip.nexthdr);
	if (csum + sizeof(__sum16) > skb->len || bpf_skb_load_bytes(skb, l4off, &p, sizeof(p)))
		return TC_NEXT;
	__builtin_memcpy(client.w, ip.daddr, sizeof(client.w));
	if (nat_reply_lookup_addr(&pod, p.source, &client, p.dest, ip.nexthdr, &v, &stat)) {
		nat_count(NAT_REV_UNTRACKED, 0);
		return TC_NEXT;
	}

	/* The address enters the transport checksum through the
	 * pseudo-header only: one difference over its 16 bytes. */
	diff = bpf_csum_diff(pod.w, sizeof(pod.w), v.vip.w, sizeof(v.vip.w), 0);
	udp = ip.nexthdr == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (diff < 0 || bpf_l4_csum_replace(skb, csum, 0, diff, BPF_F_PSEUDO_HDR | udp) ||
	    bpf_l4_csum_replace(skb, csum, p.source, v.port, udp | sizeof(v.port)) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, saddr), v.vip.w,
				sizeof(v.vip.w), 0) ||
	    bpf_skb_store_bytes(skb, l4off, &v.port, sizeof(v.port), 0)) {
		nat_count(NAT_REV_DROP_WRITE, 0);
		return TC_SHOT;
	}
	nat_count(stat, sizeof(ip) + bpf_ntohs(ip.payload_len));
	return TC_NEXT;
}

/* TC egress on the interface the tunnels arrive on: a pod's reply to a
 * translated flow leaves with source VIP:port, straight to the client.
 * Reads and writes go through skb helpers, so a reply whose headers are
 * not in the linear part is handled the same. */
static __always_inline int nat_reply(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct ports p;
	struct nat_vip v;
	__u32 l4off, csum, stat;
	__be32 vip;
	__u64 udp;

	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return nat_reply6(skb);
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
	if (!lookup_addr4(&nat_pods, ip.saddr))
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
	vip = xlb_addr_v4(&v.vip);
	udp = ip.protocol == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (bpf_l4_csum_replace(skb, csum, ip.saddr, vip, BPF_F_PSEUDO_HDR | udp | sizeof(vip)) ||
	    bpf_l4_csum_replace(skb, csum, p.source, v.port, udp | sizeof(v.port)) ||
	    bpf_l3_csum_replace(skb, IP_CHECK_OFF, ip.saddr, vip, sizeof(vip)) ||
	    bpf_skb_store_bytes(skb, IP_SADDR_OFF, &vip, sizeof(vip), 0) ||
	    bpf_skb_store_bytes(skb, l4off, &v.port, sizeof(v.port), 0)) {
		nat_count(NAT_REV_DROP_WRITE, 0);
		return TC_SHOT;
	}
	nat_count(stat, bpf_ntohs(ip.tot_len));
	return TC_NEXT;
}

#endif
