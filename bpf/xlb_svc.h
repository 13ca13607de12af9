/* The service lookup: the service index (svc_index) and the VIP filter
 * in front of the VIP set (vip_filter, vips). */
#ifndef XLB_SVC_H
#define XLB_SVC_H

#include "xlb_maps.h"

/* Home slot of a service key (internal/dataplane/lb has it in Go): the
 * 64-bit finalizer of MurmurHash3 over the key as svc_lookup compares it
 * (the words enter as little-endian loads of their wire bytes). Every key
 * bit reaches every slot bit, so VIPs of one subnet, or ports of one VIP,
 * land like random keys; the previous hash let a VIP's last octet reach
 * three slot bits, and 64 services of one /24 filled the index. Changing
 * it moves every service: see XLB_SVC_SLOTS. */
static __always_inline __u32 svc_hash(__be32 vip, __be16 port, __u8 proto)
{
	return (__u32)fmix64((__u64)vip | ((__u64)port << 32) | ((__u64)proto << 48));
}

/* Step i of the probe for the service key want from home slot h: the
 * service's slot, or 0; *end says the probe ends here (found, an empty
 * slot, or none), else it goes on past another service's slot or a
 * deleted one. */
static __always_inline struct svc_slot *svc_probe_at(__u64 want, __u32 h, int i, int *end)
{
	__u32 idx = (h + i) & (XLB_SVC_SLOTS - 1);
	struct svc_slot *s = bpf_map_lookup_elem(&svc_index, &idx);

	if (!s) {
		*end = 1;
		return 0;
	}
	__u64 got = *(const __u64 *)s & 0x00ffffffffffffffULL;
	*end = got == want || !got;
	return got == want ? s : 0;
}

/* The probe past a service's home slot (svc_lookup), out of line: few
 * services sit past their home, and the unrolled loop inlined cost every
 * lookup registers (docs/decisions/0001-lb-fast-path.md). */
static __noinline struct svc_slot *svc_probe(__u64 want, __u32 h)
{
	int end;

#pragma unroll
	for (int i = 1; i < XLB_SVC_PROBES; i++) {
		struct svc_slot *s = svc_probe_at(want, h, i, &end);

		if (end)
			return s;
	}
	return 0;
}

static __always_inline struct svc_slot *svc_lookup(__be32 vip, __be16 port, __u8 proto)
{
	__u64 want = (__u64)vip | ((__u64)port << 32) | ((__u64)proto << 48);
	__u32 h = svc_hash(vip, port, proto);
	int end;
	struct svc_slot *s = svc_probe_at(want, h, 0, &end);

	return end ? s : svc_probe(want, h);
}

/* The VIP filter's bit for an address (internal/dataplane/lb has it in Go):
 * the top XLB_VIP_FILTER_BITS bits of a multiplicative hash of the
 * address as the program loads it, its halves folded together first. The
 * product's top bits depend on every bit of the factor only through
 * carries from below, so without the fold the addresses of one /16 would
 * share a few of the bits' 2^20 values. */
static __always_inline __u32 vip_filter_bit(__be32 addr)
{
	__u32 h = (__u32)addr ^ ((__u32)addr >> 16);

	return (h * 0x9e3779b1u) >> (32 - XLB_VIP_FILTER_BITS);
}

/* Whether addr is a VIP, that is in vips: the filter answers "no" for
 * almost every other address without the hash map. */
static __always_inline int is_vip(__be32 addr)
{
	__u32 bit = vip_filter_bit(addr);
	__u32 word = bit >> 6;
	__u64 *w = bpf_map_lookup_elem(&vip_filter, &word);

	if (!w || !(*w & (1ULL << (bit & 63))))
		return 0;
	return lookup_addr4(&vips, addr) != 0;
}

/* ---- IPv6 services ---- */

/* Home slot of an IPv6 service key (svcHash in Go): the IPv4 hash's
 * first word (the VIP's first 4 bytes, port, protocol with
 * XLB_SVC_PROTO_V6), with the VIP's other 12 bytes mixed in first, so
 * that the VIPs of one prefix spread over the index as IPv4 ones do. */
static __always_inline __u32 svc_hash6(__u64 first, const __be32 *vip)
{
	__u64 rest = fmix64(((__u64)vip[1] | ((__u64)vip[2] << 32)) ^ XLB_HASH_SEED64) ^ vip[3];

	return (__u32)fmix64(first ^ rest);
}

static __always_inline struct svc_slot *svc_probe6_at(__u64 want, const __be32 *vip, __u32 h,
						       int i, int *end)
{
	__u32 idx = (h + i) & (XLB_SVC_SLOTS - 1);
	struct svc_slot *s = bpf_map_lookup_elem(&svc_index, &idx);

	if (!s) {
		*end = 1;
		return 0;
	}
	__u64 got = *(const __u64 *)s & 0x00ffffffffffffffULL;
	int hit = got == want && s->vip6[0] == vip[1] && s->vip6[1] == vip[2] &&
		  s->vip6[2] == vip[3];
	*end = hit || !got;
	return hit ? s : 0;
}

static __noinline struct svc_slot *svc_probe6(__u64 want, const __be32 *vip, __u32 h)
{
	int end;

#pragma unroll
	for (int i = 1; i < XLB_SVC_PROBES; i++) {
		struct svc_slot *s = svc_probe6_at(want, vip, h, i, &end);

		if (end)
			return s;
	}
	return 0;
}

/* svc_lookup for an IPv6 VIP (its 16 bytes at vip, in the packet). */
static __always_inline struct svc_slot *svc_lookup6(const __be32 *vip, __be16 port, __u8 proto)
{
	__u64 want = (__u64)vip[0] | ((__u64)port << 32) |
		     ((__u64)(proto | XLB_SVC_PROTO_V6) << 48);
	__u32 h = svc_hash6(want, vip);
	int end;
	struct svc_slot *s = svc_probe6_at(want, vip, h, 0, &end);

	return end ? s : svc_probe6(want, vip, h);
}

/* is_vip for an IPv6 address (in the packet): its filter bit is the IPv4 one of its
 * four words folded into one. */
static __always_inline int is_vip6(const __be32 *addr)
{
	__u32 bit = vip_filter_bit(addr[0] ^ addr[1] ^ addr[2] ^ addr[3]);
	__u32 word = bit >> 6;
	__u64 *w = bpf_map_lookup_elem(&vip_filter, &word);

	if (!w || !(*w & (1ULL << (bit & 63))))
		return 0;
	/* The address in the packet is the key as it is (union xlb_addr). */
	return bpf_map_lookup_elem(&vips, addr) != 0;
}

#endif
