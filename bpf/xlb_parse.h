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

#endif
