/* Kubernetes mode of the backend program: pods know nothing of the VIP, so
 * the node translates VIP:port -> pod:targetPort on the way in (XDP, after
 * decapsulation) and pod:targetPort -> VIP:port on the way out (TC egress
 * on the same interface). Maps, counters and the XDP half live here; the
 * programs are in xlb_backend.c. docs/kubernetes-datapath.md explains the
 * design. */
#ifndef XLB_NAT_H
#define XLB_NAT_H

#include "xlb_helpers.h"

/* Pods on this node that are the target of at least one translation. */
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

#define ICMP_TIME_EXCEEDED_TYPE 11
#define ICMP_PARAMETERPROB_TYPE 12

/* nat_svcs key: a packet tunnelled to `pod` for vip:port/proto. */
struct nat_svc_key {
	__be32 vip;
	__be32 pod;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* nat_flows key: a reply as the pod sends it, pod:target_port -> client. */
struct nat_flow_key {
	__be32 pod;
	__be32 client;
	__be16 pod_port;
	__be16 client_port;
	__u8 proto;
	__u8 pad[3];
};

/* What a reply's source becomes. */
struct nat_vip {
	__be32 vip;
	__be16 port;
	__u16 pad;
};

/* nat_rev_ports key: the fallback for replies without a flow record. */
struct nat_rev_key {
	__be32 pod;
	__be16 pod_port;
	__u8 proto;
	__u8 pad;
};

/* Local pods that are translation targets: an encapsulated packet whose
 * outer destination is one of them is decapsulated and translated. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_NAT_MAX_PODS);
	__type(key, __be32);
	__type(value, __u8);
} nat_pods SEC(".maps");

/* Local pods -> the ID of their network namespace as the node's namespace
 * knows it (the link-netnsid of the pod's veth), where daisy chaining
 * looks for a pod's sockets. A pod without an entry is never chained:
 * its packets are translated and delivered as without a hint. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_NAT_MAX_PODS);
	__type(key, __be32);
	__type(value, __u32);
} nat_pod_netns SEC(".maps");

/* (VIP, port, protocol, pod) -> target port (network order). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_NAT_MAX_ENTRIES);
	__type(key, struct nat_svc_key);
	__type(value, __be16);
} nat_svcs SEC(".maps");

/* Reply 5-tuple -> VIP:port, written by XDP for every translated flow.
 * Keyed by the client's address and port, so two VIPs that share a pod
 * port stay apart. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XLB_NAT_MAX_FLOWS);
	__type(key, struct nat_flow_key);
	__type(value, struct nat_vip);
} nat_flows SEC(".maps");

/* (pod, target port, protocol) -> VIP:port, for replies whose flow record
 * is gone. The control plane fills it only when asked to and only where
 * one VIP:port maps to the pod port: it would also rewrite replies to
 * anyone who reaches the pod port directly (health checks among them). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_NAT_MAX_ENTRIES);
	__type(key, struct nat_rev_key);
	__type(value, struct nat_vip);
} nat_rev_ports SEC(".maps");

/* The names in internal/backendhost (NATStatNames) follow this order. */
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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NAT_STAT_MAX);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} nat_stats SEC(".maps");

static __always_inline void nat_count(__u32 stat, __u64 bytes)
{
	struct xlb_counter *c = bpf_map_lookup_elem(&nat_stats, &stat);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* Incremental checksum update (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).
 * One's-complement sums do not depend on byte order, so the raw 16-bit
 * halves of network-order fields go in as they are. A diff is the sum of
 * ~old + new over the changed words; several diffs add up before one
 * csum_apply. */
static __always_inline __u32 csum_diff32(__be32 from, __be32 to)
{
	return (__u32)(__u16)~from + (__u16)(~from >> 16) + (__u16)to + (__u16)(to >> 16);
}

static __always_inline __u32 csum_diff16(__u16 from, __u16 to)
{
	return (__u32)(__u16)~from + to;
}

static __always_inline __u16 csum_apply(__u16 check, __u32 diff)
{
	__u32 s = (__u32)(__u16)~check + diff;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Where TCP and UDP keep their checksum, from the start of their header,
 * and how many header bytes that needs; 0 for other protocols. */
static __always_inline __u32 l4_csum_off(__u8 proto)
{
	return proto == IPPROTO_TCP ? 16 : proto == IPPROTO_UDP ? 6 : 0;
}

/* Remember the flow for its replies. A lookup refreshes an LRU entry, so
 * only a missing or changed record costs an update. */
static __always_inline void nat_record(__be32 pod, __be16 target_port, __be32 client,
				       __be16 client_port, __u8 proto, __be32 vip, __be16 port)
{
	struct nat_flow_key k = {
		.pod = pod, .client = client, .pod_port = target_port,
		.client_port = client_port, .proto = proto,
	};
	struct nat_vip v = {.vip = vip, .port = port};
	struct nat_vip *cur = bpf_map_lookup_elem(&nat_flows, &k);

	if (cur && cur->vip == vip && cur->port == port)
		return;
	if (bpf_map_update_elem(&nat_flows, &k, &v, BPF_ANY))
		nat_count(NAT_NOTE_FLOW_FAILED, 0);
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

	struct nat_svc_key k = {.vip = q->saddr, .pod = pod, .port = qp->source, .proto = q->protocol};
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

	struct nat_svc_key k = {.vip = inner->daddr, .pod = pod, .port = p->dest, .proto = inner->protocol};
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

#endif
