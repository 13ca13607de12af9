package dataplane

// ReasonNames are the LB program's pass/drop reasons, in the order of
// enum xlb_reason in bpf/xlb_consts.h (a test holds the two together).
var ReasonNames = []string{
	"pass_not_ipv4",
	"pass_not_tcp_udp",
	"pass_no_service",
	"pass_ttl_exceeded",
	"pass_no_neigh",
	"drop_malformed_eth",
	"drop_malformed_ip",
	"drop_malformed_l4",
	"drop_fragment",
	"drop_no_backend",
	"drop_no_route",
	"drop_too_big",
	"drop_encap_failed",
	"tx_icmp_too_big",
	"note_ip_options",
	"drop_vip_no_service",
	"note_icmp_to_backend",
	"note_ct_new",
	"note_ct_midflow_miss",
}
