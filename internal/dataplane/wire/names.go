package wire

// The names of the programs' counters, in the order of their enums in
// bpf/xlb_structs.h (the counter maps' keys); a test holds each list to
// its enum in the compiled object.
var (
	// ReasonNames are the LB program's pass/drop reasons (enum
	// xlb_reason).
	ReasonNames = []string{
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
		"tx_ping_reply",
		"drop_ping_refused",
		"drop_denied",
		"drop_source_range",
		"drop_nat_no_session",
		"drop_nat_no_port",
		"pass_ipv6_ext",
		"drop_ipv6_ext",
		"tx_arp_reply",
		"pass_arp_expired",
		"tx_nd_advert",
	}

	// LBNATStatNames name the LB's NAT counters (enum lbnat_stat).
	LBNATStatNames = []string{
		"created", "alloc_failed", "expired", "no_reply", "reverse_miss", "fragment", "icmp_translated",
		"promoted", "promote_failed", "forward", "reverse", "ended", "reclaimed", "alloc_fast_fail",
	}

	// DecapStatNames name the decapsulation counters (enum decap_stat).
	DecapStatNames = []string{"decap_ipip", "decap_gue", "pass_not_ours", "drop_bad_inner", "drop_bad_gue"}

	// ChainStatNames name the daisy-chaining counters (enum chain_stat).
	ChainStatNames = []string{"syn", "socket", "syncookie", "chained", "stale_drop", "no_socket", "chain_no_route", "chain_no_neighbour",
		"chain_drop_untrusted_source", "chain_drop_unknown_owner"}

	// NATStatNames name the Kubernetes translation's counters (enum
	// nat_stat).
	NATStatNames = []string{
		"nat_fwd", "nat_fwd_icmp",
		"nat_rev_flow", "nat_rev_fallback", "nat_rev_icmp", "nat_rev_untracked", "nat_rev_fragment", "nat_rev_drop_write",
		"nat_drop_no_entry", "nat_drop_fragment", "nat_drop_malformed", "nat_drop_proto",
		"nat_note_flow_failed",
	}
)
