// SPDX-License-Identifier: GPL-2.0
/* xlb backend programs, on a backend host's interface.
 *
 * XDP (xlb_decap) strips the IPIP or GUE header that an xlb node added.
 * Tunnelled to this host, the inner packet's destination is a VIP
 * configured on this host (on lo), and the stack takes it as it is.
 * Tunnelled to a local pod (Kubernetes mode, xlb_nat.h), the inner
 * destination VIP:port becomes the pod's address and target port first.
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
		int r = nat_forward(data_end, inner, ip->daddr);

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
