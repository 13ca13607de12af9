// SPDX-License-Identifier: GPL-2.0
/* No program: the types of xlb_structs.h, each named once, for bpf2go to
 * generate their Go mirrors in internal/dataplane/wire from. A type
 * enters the object's BTF through a declaration that uses it: here, one
 * struct with a member of each, behind a pointer no program reads. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xlb_structs.h"

struct xlb_wire_types {
	/* Both programs */
	union xlb_addr addr;
	struct xlb_counter counter;
	struct xlb_gue_hint gue_hint;
	struct xlb_gue_hint6 gue_hint6;
	/* The LB */
	enum xlb_reason reason;
	enum xlb_flow_hash flow_hash;
	enum xlb_encap encap;
	enum xlb_svc_flag svc_flag;
	enum xlb_svc_proto_flag svc_proto_flag;
	enum xlb_table_entry_flag table_entry_flag;
	struct svc_slot svc_slot;
	struct backend backend;
	xlb_table_entry table_entry;
	struct chain_entry chain_entry;
	struct ct_key ct_key;
	struct ct_entry ct_entry;
	struct nh_entry nh_entry;
	struct backend_state backend_state;
	union xlb_deny_cell deny_cell;
	enum xlb_deny_layout deny_layout;
	struct xlb_deny6_node deny6_node;
	struct xlb_ranges4 ranges4;
	struct xlb_ranges6 ranges6;
	struct lbnat_key lbnat_key;
	struct lbnat_session lbnat_session;
	struct lbnat_fwd lbnat_fwd;
	struct lbnat_cfg lbnat_cfg;
	struct lbnat_be_key lbnat_be_key;
	struct l2_owner l2_owner;
	enum lbnat_state lbnat_state;
	enum lbnat_flag lbnat_flag;
	enum lbnat_cfg_flag lbnat_cfg_flag;
	enum lbnat_stat lbnat_stat;
	/* The backend host */
	enum decap_stat decap_stat;
	enum chain_stat chain_stat;
	struct chain_cfg chain_cfg;
	enum chain_cfg_flag chain_cfg_flag;
	struct chain_peer_key chain_peer_key;
	struct chain_svc_key chain_svc_key;
	enum nat_stat nat_stat;
	struct nat_svc_key nat_svc_key;
	struct nat_flow_key nat_flow_key;
	struct nat_vip nat_vip;
	struct nat_rev_key nat_rev_key;
};

struct xlb_wire_types *xlb_wire_types;

char LICENSE[] SEC("license") = "GPL";
