package config

// NormalCommunity parses a standard community as services[].bgp takes
// it (ASN:VALUE, or a well-known name in any case) and returns its normal
// form: the name of a well-known one, else ASN:VALUE in decimal. why says
// what is wrong with s, "" when nothing is; the Kubernetes source reads
// the BGPAdvertisements' and annotations' communities with it.
func NormalCommunity(s string) (normal, why string) {
	v, why := parseCommunity(s)
	if why != "" {
		return "", why
	}
	return formatCommunity(v), ""
}
