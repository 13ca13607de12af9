/* The few protocol headers xlb parses, defined here instead of pulling uapi
 * headers that break with -target bpf (see DESIGN.md). */
#ifndef XLB_HEADERS_H
#define XLB_HEADERS_H

#include <linux/types.h>

#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_ARP 0x0806
#define IPPROTO_ICMP 1
#define IPPROTO_IPIP 4
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_HOPOPTS 0   /* IPv6 hop-by-hop options */
#define IPPROTO_IPV6 41     /* IPv6 inside (IPv6-in-IPv4, IPv6-in-IPv6) */
#define IPPROTO_ROUTING 43  /* IPv6 routing header */
#define IPPROTO_FRAGMENT 44 /* IPv6 fragment header */
#define IPPROTO_ICMPV6 58
#define IPPROTO_DSTOPTS 60  /* IPv6 destination options */

/* ICMPv6 (RFC 4443, RFC 4861): the errors, and the neighbour discovery
 * types, which xlb passes untouched. */
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_TIME_EXCEED 3
#define ICMPV6_PARAMPROB 4
#define ICMPV6_ND_FIRST 133 /* router solicitation */
#define ICMPV6_NS 135       /* neighbour solicitation */
#define ICMPV6_NA 136       /* neighbour advertisement */
#define ICMPV6_ND_LAST 137  /* redirect */

#define IP_MF 0x2000
#define IP_DF 0x4000
#define IP_OFFSET 0x1fff

#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4

struct ethhdr {
	unsigned char h_dest[ETH_ALEN];
	unsigned char h_source[ETH_ALEN];
	__be16 h_proto;
} __attribute__((packed));

/* A neighbour solicitation or advertisement (RFC 4861 4.3, 4.4): the
 * ICMPv6 header, flags (R, S, O in the top bits of an advertisement) and
 * the target address; options follow. */
struct nd_msg {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 flags;
	__be32 target[4];
};

/* The link-layer address option (RFC 4861 4.6.1) of Ethernet: 8 bytes. */
struct nd_opt_lladdr {
	__u8 type; /* 1: source, 2: target */
	__u8 len;  /* in 8-byte units: 1 */
	__u8 mac[ETH_ALEN];
};

/* ARP for IPv4 over Ethernet (RFC 826), the only kind xlb answers. */
#define ARPHRD_ETHER 1
#define ARPOP_REQUEST 1
#define ARPOP_REPLY 2

struct arp_eth4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 oper;
	__u8 sha[ETH_ALEN];
	__be32 spa;
	__u8 tha[ETH_ALEN];
	__be32 tpa;
} __attribute__((packed));

struct iphdr {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	__u8 ihl : 4, version : 4;
#else
	__u8 version : 4, ihl : 4;
#endif
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

/* IPv6's fixed header. The first word holds version (4 bits), traffic
 * class (8) and flow label (20), in network order. */
struct ipv6hdr {
	__be32 vtf;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__be32 saddr[4];
	__be32 daddr[4];
};

/* The IP version of an IPv6 header's first word (6 for IPv6). */
static inline __attribute__((always_inline)) __u8 ipv6_version(const struct ipv6hdr *h)
{
	return *(const __u8 *)h >> 4;
}

/* The start of an IPv6 extension header that has a length: hop-by-hop
 * and destination options (and routing), hdrlen 8-byte units past the
 * first 8. */
struct ipv6_opt_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
};

/* TCP and UDP both start with the two ports; that is all xlb reads. */
struct ports {
	__be16 source;
	__be16 dest;
};

struct udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__sum16 check;
};

/* GUE (draft-ietf-intarea-gue) variant 0 base header:
 * ver(2) C(1) hlen(5) | proto/ctype(8) | flags(16). xlb sends hlen 0
 * (4: the daisy-chain hint), proto 4 (IPv4 inside), no flags. */
struct guehdr {
	__u8 hlen_c_ver;
	__u8 proto;
	__be16 flags;
};

struct icmphdr_frag {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 unused;
	__be16 mtu;
};

struct icmp6hdr_too_big {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 mtu;
};

#endif
