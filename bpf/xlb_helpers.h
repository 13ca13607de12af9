/* Small inline helpers: checksums and the flow hashes. */
#ifndef XLB_HELPERS_H
#define XLB_HELPERS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "xlb_consts.h"
#include "xlb_headers.h"
#include "xlb_structs.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* The union xlb_addr of IPv4 address a, for keys and values that hold
 * either family; and the IPv4 address in one. */
#define XLB_ADDR4(a) ((union xlb_addr){ .w = { 0, 0, bpf_htonl(0xffff), (a) } })

static __always_inline __be32 xlb_addr_v4(const union xlb_addr *a)
{
	return a->w[3];
}

/* Whether a is an IPv4 address (IPv4-mapped). */
static __always_inline int xlb_addr_is4(const union xlb_addr *a)
{
	return !(a->w[0] | a->w[1] | (a->w[2] ^ bpf_htonl(0xffff)));
}

static __always_inline int xlb_addr_eq(const union xlb_addr *a, const union xlb_addr *b)
{
	return !((a->w[0] ^ b->w[0]) | (a->w[1] ^ b->w[1]) | (a->w[2] ^ b->w[2]) |
		 (a->w[3] ^ b->w[3]));
}

/* Look IPv4 address a up in a map keyed by union xlb_addr. */
static __always_inline void *lookup_addr4(void *map, __be32 a)
{
	union xlb_addr k = XLB_ADDR4(a);

	return bpf_map_lookup_elem(map, &k);
}

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Checksum of a 20-byte IPv4 header (no options), check field zeroed. */
static __always_inline __u16 ipv4_csum(struct iphdr *ip)
{
	__u16 *w = (__u16 *)ip;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	return csum_fold(sum);
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

/* Decrement TTL and patch the checksum incrementally (RFC 1624), as the
 * kernel's ip_decrease_ttl does. */
static __always_inline void ipv4_decrease_ttl(struct iphdr *ip)
{
	__u32 check = (__u32)ip->check;

	check += (__u32)bpf_htons(0x0100);
	ip->check = (__sum16)(check + (check >= 0xffff));
	ip->ttl--;
}

static __always_inline __u32 rol32(__u32 w, unsigned int s)
{
	return (w << s) | (w >> (32 - s));
}

/* MurmurHash3's 64-bit finalizer: one-to-one, and every input bit flips
 * every output bit with probability 1/2. The flow hash fmix64 and the
 * service index's svc_hash both run it (fmix64 in internal/dataplane/lb). */
static __always_inline __u64 fmix64(__u64 k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/* The flow hashes (dataplane.flowHash; internal/dataplane/lb has both in Go,
 * FlowHash, and a test holds each to its twin here). Addresses and ports
 * enter as the little-endian loads of their wire bytes.
 *
 * fmix64, the default: the 5-tuple packed into one 64-bit word, then
 * MurmurHash3's 64-bit finalizer. Within one service (VIP, port and
 * protocol fixed) the word is a one-to-one image of the client's address
 * and port, and the finalizer is one-to-one too, so two flows of a
 * service share a hash only when they share its 32 bits, by chance. Every
 * input bit flips every output bit with probability 1/2 within sampling
 * error (TestFlowHashAvalanche). */
static __always_inline __u32 xlb_flow_hash_fmix64(__be32 saddr, __be32 daddr, __be16 sport,
						   __be16 dport, __u8 proto)
{
	__u64 k = ((__u64)saddr << 32) | ((__u32)sport | ((__u32)dport << 16));

	k ^= (__u64)daddr ^ ((__u64)proto << 56) ^ XLB_HASH_SEED64;
	return (__u32)fmix64(k);
}

/* lookup3, xlb's flow hash before fmix64, for clusters that started with
 * it: the final mix of Bob Jenkins' lookup3 over three words built from
 * the 5-tuple and a fixed seed. Its rotations cost BPF three instructions
 * each, which makes it slower than fmix64 (docs/decisions/0001-lb-fast-path.md). */
static __always_inline __u32 xlb_flow_hash_lookup3(__be32 saddr, __be32 daddr, __be16 sport,
						    __be16 dport, __u8 proto)
{
	__u32 init = XLB_HASH_SEED + 0xdeadbeef + (3 << 2) + proto;
	__u32 a = saddr + init;
	__u32 b = daddr + init;
	__u32 c = (((__u32)sport) | ((__u32)dport << 16)) + init;

	c ^= b; c -= rol32(b, 14);
	a ^= c; a -= rol32(c, 11);
	b ^= a; b -= rol32(a, 25);
	c ^= b; c -= rol32(b, 16);
	a ^= c; a -= rol32(c, 4);
	b ^= a; b -= rol32(a, 14);
	c ^= b; c -= rol32(b, 24);
	return c;
}

#endif
