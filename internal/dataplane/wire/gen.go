package wire

// The object is committed with its bindings, like the programs'. Every
// type of bpf/xlb_structs.h is listed: a type missing here has no Go
// mirror, and a program's bindings generate none (-no-global-types).
//go:generate go tool bpf2go -tags linux -target bpfel -type xlb_addr -type xlb_counter -type xlb_gue_hint -type xlb_gue_hint6 -type xlb_reason -type xlb_flow_hash -type xlb_encap -type xlb_svc_flag -type xlb_svc_proto_flag -type xlb_table_entry_flag -type svc_slot -type backend -type xlb_table_entry -type chain_entry -type ct_key -type ct_entry -type nh_entry -type backend_state -type xlb_deny_cell -type xlb_deny_layout -type xlb_deny6_node -type xlb_ranges4 -type xlb_ranges6 -type lbnat_key -type lbnat_session -type lbnat_cfg -type lbnat_be_key -type lbnat_state -type lbnat_flag -type lbnat_cfg_flag -type lbnat_stat -type decap_stat -type chain_stat -type chain_cfg -type chain_cfg_flag -type chain_peer_key -type chain_svc_key -type nat_stat -type nat_svc_key -type nat_flow_key -type nat_vip -type nat_rev_key wire ../../../bpf/xlb_wire.c -- -O2 -mcpu=v3 -g -Wall -Werror -I../../../bpf -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=../../../bpf=bpf
