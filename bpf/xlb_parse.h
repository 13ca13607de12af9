/* Parsing of Ethernet / IPv4 / TCP-UDP ports, with every bound checked
 * before a byte is read. */
#ifndef XLB_PARSE_H
#define XLB_PARSE_H

#include "xlb_helpers.h"

struct pkt {
	struct ethhdr *eth;
	struct iphdr *ip;
	/* The flow the packet belongs to, as the client sent it: for an
	 * ICMP error about a reply, the flow of the quoted packet. */
	__be32 flow_src;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u16 ip_len;  /* IPv4 total length */
	__u8 fragment; /* MF set or offset != 0 */
	__u8 options;  /* IHL > 5 */
};

enum parse_result {
	PARSE_OK = 0,      /* IPv4 TCP/UDP with ports (unless fragment) */
	PARSE_NOT_IPV4,
	PARSE_NOT_TCP_UDP,
	PARSE_BAD_ETH,
	PARSE_BAD_IP,
	PARSE_BAD_L4,
};

static __always_inline int parse_ipv4(void *data, void *data_end, struct pkt *p)
{
	struct ethhdr *eth = data;
	struct iphdr *ip;
	__u32 ihl;

	if ((void *)(eth + 1) > data_end)
		return PARSE_BAD_ETH;
	p->eth = eth;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return PARSE_NOT_IPV4;

	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return PARSE_BAD_IP;
	ihl = ip->ihl;
	if (ip->version != 4 || ihl < 5)
		return PARSE_BAD_IP;
	p->ip = ip;
	p->ip_len = bpf_ntohs(ip->tot_len);
	/* The frame may carry Ethernet padding after the datagram, never less
	 * than the datagram. */
	if (p->ip_len < ihl * 4 || (void *)ip + p->ip_len > data_end)
		return PARSE_BAD_IP;
	p->options = ihl > 5;
	p->fragment = (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)) != 0;

	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return PARSE_NOT_TCP_UDP;
	if (p->fragment)
		return PARSE_OK; /* non-first fragments have no ports */

	struct ports *l4 = (void *)ip + ihl * 4;
	if ((void *)(l4 + 1) > data_end || (void *)(l4 + 1) > (void *)ip + p->ip_len)
		return PARSE_BAD_L4;
	p->flow_src = ip->saddr;
	p->sport = l4->source;
	p->dport = l4->dest;
	p->proto = ip->protocol;
	return PARSE_OK;
}

#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12

/* Whether [.., end) lies past the datagram (dgram_end) or the frame
 * (data_end). The frame test alone is what the verifier needs; the
 * datagram test keeps bytes after the datagram (Ethernet padding, or
 * whatever a sender put there) from being read as part of it. */
static __always_inline int past_datagram(void *end, void *dgram_end, void *data_end)
{
	return end > data_end || end > dgram_end;
}

/* An ICMP error (destination unreachable, fragmentation needed among
 * them, time exceeded, parameter problem) addressed to a VIP quotes a
 * reply that a backend sent from the VIP. Fill in the flow of that
 * connection as the client sees it, so the error reaches the backend
 * that owns it. Its header and quote are read within the datagram
 * (parse_ipv4 checked that it lies within the frame). Returns 0, or -1
 * when the packet is not such an error. */
static __always_inline int parse_icmp_error(struct pkt *p, void *data_end)
{
	struct iphdr *ip = p->ip;
	void *dgram_end = (void *)ip + p->ip_len;
	__u8 *icmp = (void *)ip + ip->ihl * 4;
	struct iphdr *in;
	struct ports *l4;

	if (ip->protocol != IPPROTO_ICMP || p->fragment)
		return -1;
	if (past_datagram(icmp + 8, dgram_end, data_end))
		return -1;
	if (icmp[0] != ICMP_DEST_UNREACH && icmp[0] != ICMP_TIME_EXCEEDED &&
	    icmp[0] != ICMP_PARAMETERPROB)
		return -1;
	in = (void *)(icmp + 8);
	if (past_datagram(in + 1, dgram_end, data_end) || in->ihl < 5 || in->saddr != ip->daddr)
		return -1;
	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return -1;
	l4 = (void *)in + in->ihl * 4;
	if (past_datagram(l4 + 1, dgram_end, data_end))
		return -1;
	p->flow_src = in->daddr;
	p->sport = l4->dest;
	p->dport = l4->source;
	p->proto = in->protocol;
	return 0;
}

/* ---- IPv6 ---- */

/* An IPv6 packet as the LB reads it. */
struct pkt6 {
	struct ipv6hdr *ip6;
	/* The flow, as the client sent it (for an ICMPv6 error about a
	 * reply, the flow of the quoted packet): its client's address, in
	 * the packet. */
	const __be32 *flow_src;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 nexthdr; /* the upper-layer protocol, past the skipped extension headers */
	__u16 ip_len; /* fixed header + payload */
	__u16 l4_off; /* from the fixed header to the upper-layer header */
};

enum parse6_result {
	PARSE6_OK = 0,       /* TCP/UDP with ports */
	PARSE6_NOT_TCP_UDP,  /* another upper-layer protocol (nexthdr, l4_off set) */
	PARSE6_FRAGMENT,     /* a fragment header */
	PARSE6_EXT,          /* an extension header xlb does not skip */
	PARSE6_BAD_IP,       /* truncated fixed or extension header, bad version or length */
	PARSE6_BAD_L4,       /* upper-layer header shorter than the ports */
};

/* Parse the IPv6 packet at ip6 (behind its Ethernet header): its fixed
 * header, then hop-by-hop options (first only, RFC 8200 4.3),
 * destination options and routing headers with no segments left, which
 * change nothing for the LB, up to XLB_IPV6_EXT_MAX of them. A routing
 * header with segments left sends the packet to another address first,
 * and a fragment's ports may be in another packet: the caller leaves
 * both to the kernel, as everything it does not skip. */
static __always_inline int parse_ipv6(struct ipv6hdr *ip6, void *data_end, struct pkt6 *p)
{
	if ((void *)(ip6 + 1) > data_end)
		return PARSE6_BAD_IP;
	if ((bpf_ntohl(ip6->vtf) >> 28) != 6)
		return PARSE6_BAD_IP;
	p->ip6 = ip6;
	p->ip_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	/* Ethernet padding may follow the datagram, never less than it. */
	if ((void *)ip6 + p->ip_len > data_end)
		return PARSE6_BAD_IP;

	void *dgram_end = (void *)ip6 + p->ip_len;
	__u8 nh = ip6->nexthdr;
	__u32 off = sizeof(*ip6);

#pragma unroll
	for (int i = 0; i < XLB_IPV6_EXT_MAX; i++) {
		if (nh != IPPROTO_DSTOPTS && nh != IPPROTO_ROUTING &&
		    !(nh == IPPROTO_HOPOPTS && i == 0))
			break;
		__u8 *e = (void *)ip6 + off;

		/* Every extension header is at least 8 bytes long. */
		if (past_datagram(e + 8, dgram_end, data_end))
			return PARSE6_BAD_IP;
		if (nh == IPPROTO_ROUTING && e[3] != 0)
			return PARSE6_EXT;
		nh = e[0];
		off += ((__u32)e[1] + 1) * 8;
	}
	p->nexthdr = nh;
	p->l4_off = off;
	if (nh == IPPROTO_FRAGMENT)
		return PARSE6_FRAGMENT;
	if (nh == IPPROTO_HOPOPTS || nh == IPPROTO_DSTOPTS || nh == IPPROTO_ROUTING)
		return PARSE6_EXT;
	if (nh != IPPROTO_TCP && nh != IPPROTO_UDP)
		return PARSE6_NOT_TCP_UDP;

	struct ports *l4 = (void *)ip6 + off;
	if (past_datagram(l4 + 1, dgram_end, data_end))
		return PARSE6_BAD_L4;
	p->flow_src = ip6->saddr;
	p->sport = l4->source;
	p->dport = l4->dest;
	p->proto = nh;
	return PARSE6_OK;
}

static __always_inline int addr6_eq(const __be32 *a, const __be32 *b)
{
	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]));
}

/* The ICMPv6 type of a packet parse_ipv6 found to be ICMPv6, or -1 when
 * its header is not within the datagram. */
static __always_inline int icmp6_type(struct pkt6 *p, void *data_end)
{
	__u8 *icmp = (void *)p->ip6 + p->l4_off;

	if (past_datagram(icmp + 8, (void *)p->ip6 + p->ip_len, data_end))
		return -1;
	return icmp[0];
}

/* parse_icmp_error for IPv6: an ICMPv6 error (destination unreachable,
 * packet too big, time exceeded, parameter problem) addressed to a VIP
 * quotes a reply a backend sent from the VIP. Fill in the flow of that
 * connection as the client sees it. The quote must carry TCP or UDP
 * right behind its fixed header. Returns 0, or -1 when the packet is not
 * such an error. */
static __always_inline int parse_icmp6_error(struct pkt6 *p, void *data_end)
{
	struct ipv6hdr *ip6 = p->ip6;
	void *dgram_end = (void *)ip6 + p->ip_len;
	__u8 *icmp = (void *)ip6 + p->l4_off;
	struct ipv6hdr *in;
	struct ports *l4;

	if (p->nexthdr != IPPROTO_ICMPV6)
		return -1;
	if (past_datagram(icmp + 8, dgram_end, data_end))
		return -1;
	if (icmp[0] < ICMPV6_DEST_UNREACH || icmp[0] > ICMPV6_PARAMPROB)
		return -1;
	in = (void *)(icmp + 8);
	if (past_datagram(in + 1, dgram_end, data_end) || !addr6_eq(in->saddr, ip6->daddr))
		return -1;
	if (in->nexthdr != IPPROTO_TCP && in->nexthdr != IPPROTO_UDP)
		return -1;
	l4 = (void *)(in + 1);
	if (past_datagram(l4 + 1, dgram_end, data_end))
		return -1;
	p->flow_src = in->daddr;
	p->sport = l4->dest;
	p->dport = l4->source;
	p->proto = in->nexthdr;
	return 0;
}

#endif
