/* Maps of the backend-host program (xlb_backend.c): its decapsulation,
 * daisy chaining and Kubernetes translation. Keys and values are in
 * xlb_structs.h; the code that reads them in xlb_decap.h, xlb_chain.h and
 * xlb_nat.h. */
#ifndef XLB_BACKEND_MAPS_H
#define XLB_BACKEND_MAPS_H

#include "xlb_helpers.h"

/* ---- Kubernetes translation (xlb_nat.h) ---- */

/* Local pods that are translation targets: an encapsulated packet whose
 * outer destination is one of them is decapsulated and translated. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_NAT_MAX_PODS);
	__type(key, union xlb_addr);
	__type(value, __u8);
} nat_pods SEC(".maps");

/* Local pods -> the ID of their network namespace as the node's namespace
 * knows it (the link-netnsid of the pod's veth), where daisy chaining
 * looks for a pod's sockets. A pod without an entry is never chained:
 * its packets are translated and delivered as without a hint. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_NAT_MAX_PODS);
	__type(key, union xlb_addr);
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

/* Counts by enum nat_stat. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NAT_STAT_MAX);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} nat_stats SEC(".maps");

/* ---- Decapsulation (xlb_decap.h) ---- */

/* Outer destinations that are this host (written by `xlb backend`). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, union xlb_addr);
	__type(value, __u8);
} host_addrs SEC(".maps");

/* VIPs configured locally: an inner packet for anything else is dropped,
 * so the host never becomes an open relay for spoofed inner packets. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_MAX_VIPS);
	__type(key, union xlb_addr);
	__type(value, __u8);
} decap_vips SEC(".maps");

/* Counts by enum decap_stat. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DECAP_STAT_MAX);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} decap_stats SEC(".maps");

/* ---- Daisy chaining (xlb_chain.h) ---- */

/* The chaining configuration: one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain_cfg);
} chain_cfg SEC(".maps");

/* Who may have a packet chained, and to whom: prefixes (struct
 * chain_peer_key), written by `xlb backend` (--chain-from, --chain-to,
 * or the cluster). chain_from holds the xlb nodes; chain_to the backends
 * that may be a slot's previous owner, which are sources too, as a
 * backend that chains a packet sends it on from its own address. Lookups
 * cost the same whatever the sets hold. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, XLB_CHAIN_MAX_NODES);
	__type(key, struct chain_peer_key);
	__type(value, __u8);
} chain_from SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, XLB_CHAIN_MAX_OWNERS);
	__type(key, struct chain_peer_key);
	__type(value, __u8);
} chain_to SEC(".maps");

/* The newest table generation seen per service. A full map only loses
 * the stale-instance drop for the services that did not fit: their
 * packets are delivered as without a hint. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XLB_CHAIN_MAX_SERVICES);
	__type(key, struct chain_svc_key);
	__type(value, __u32);
} chain_gens SEC(".maps");

/* Counts by enum chain_stat. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CHAIN_STAT_MAX);
	__type(key, __u32);
	__type(value, struct xlb_counter);
} chain_stats SEC(".maps");

#endif
