package api

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The metrics are collected from a fresh Status on every scrape, so they
// can never disagree with `xlb status`.

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	buildInfo        = desc("xlb_build_info", "Build information of the running agent; the value is always 1.", "version")
	dataplaneInfo    = desc("xlb_dataplane_info", "The data plane's flow hash and Maglev table size, which every node of a cluster must share; the value is always 1.", "flow_hash", "table_size")
	configGeneration = desc("xlb_config_generation", "Number of configurations loaded since the agent started; 1 is the one it started with.")
	lastReloadOK     = desc("xlb_config_last_reload_successful", "Whether the last configuration (re)load succeeded (1) or failed and the previous configuration is still running (0).")
	lastReloadTime   = desc("xlb_config_last_reload_timestamp_seconds", "Time of the last configuration (re)load attempt, in seconds since the Unix epoch.")
	reloadsTotal     = desc("xlb_config_reloads_total", "Configuration reloads after the start (file change or SIGHUP) by result.", "result")
	svcPackets       = desc("xlb_service_packets_total", "Packets the data plane forwarded for a service.", "service")
	svcBytes         = desc("xlb_service_bytes_total", "Bytes the data plane forwarded for a service, before encapsulation.", "service")
	bePackets        = desc("xlb_backend_packets_total", "Packets the data plane sent to a backend of a service.", "service", "backend")
	beBytes          = desc("xlb_backend_bytes_total", "Bytes the data plane sent to a backend of a service, before encapsulation.", "service", "backend")
	svcRangeDrops    = desc("xlb_service_source_range_dropped_packets_total", "Packets to a service the data plane dropped because their source is outside the service's source ranges.", "service")
	svcRangeBytes    = desc("xlb_service_source_range_dropped_bytes_total", "Bytes of the packets to a service dropped for a source outside its source ranges.", "service")
	denyPrefixes     = desc("xlb_policy_deny_prefixes", "Prefixes in the node's deny list (policy.deny); packets to any VIP from them are dropped, counted in xlb_dataplane_reason_packets_total{reason=\"drop_denied\"}.")
	conntrackFlows   = desc("xlb_conntrack_flows", "Flows in the flow table of the stateful services (flows: stateful); recent flows, not open connections: a full table evicts the oldest.")
	conntrackSize    = desc("xlb_conntrack_flows_capacity", "Flows the flow table of the stateful services holds at most (dataplane.conntrackSize).")
	reasonPackets    = desc("xlb_dataplane_reason_packets_total", "Packets the data plane passed to the kernel or dropped, by reason.", "reason")
	serviceUp        = desc("xlb_service_up", "Whether a service has a healthy backend with a weight above 0 (1), or none and the node drops its packets (0).", "service")
	backendUp        = desc("xlb_backend_up", "Whether a backend of a service passes its health checks (1; also before the first probe and without checks) or failed them and gets no new flows (0).", "service", "backend")
	checkDuration    = desc("xlb_health_check_duration_seconds", "Duration of the last health check of a backend of a service, successful or not.", "service", "backend")
	bgpPeerUp        = desc("xlb_bgp_peer_up", "Whether the BGP session with a peer is established (1) or not (0).", "peer")
	bgpPeerFlaps     = desc("xlb_bgp_peer_flaps_total", "Times the BGP session with a peer left the established state.", "peer")
	bgpPeerReceived  = desc("xlb_bgp_peer_prefixes_received", "Prefixes a BGP peer sent that the node holds (none is imported), as last reported; absent while unknown.", "peer")
	bgpPeerMax       = desc("xlb_bgp_peer_max_prefixes", "The most prefixes a BGP peer may send before its session is closed (maxPrefixes).", "peer")
	bgpPeerOverLimit = desc("xlb_bgp_peer_prefix_limit_exceeded", "Whether the BGP session with a peer is held down because the peer sent more than maxPrefixes prefixes (1) or not (0).", "peer")
	bgpPeerGR        = desc("xlb_bgp_peer_graceful_restart", "For a BGP peer this node advertises graceful restart to: whether the peer advertised it too and keeps the node's routes while the agent restarts (1), or not or not known yet (0).", "peer")
	bgpRoute         = desc("xlb_bgp_route_announced", "Whether this node announces a VIP (1) or withdrew it because it cannot serve it (0).", "prefix")
	bfdUp            = desc("xlb_bfd_session_up", "Whether the BFD session guarding a BGP peer is up (1) or not (0).", "peer")
	natSessions      = desc("xlb_nat_sessions", "NAT sessions in use on the node (forwarding nat and dnat), embryonic ones included.")
	natCapacity      = desc("xlb_nat_sessions_capacity", "NAT sessions the node's session table holds (nat.sessions).")
	natEmbryonic     = desc("xlb_nat_sessions_embryonic", "NAT sessions in use not established yet: no reply from their backend, or no packet from their client since.")
	natAllocFailures = desc("xlb_nat_allocation_failures_total", "New connections to NAT services that got no session (no free port on the NAT address, or no room in the table); their packets were dropped.")
	natExpired       = desc("xlb_nat_expired_total", "NAT sessions ended by their idle timeout.")
	natReverseMisses = desc("xlb_nat_reverse_misses_total", "Packets from a backend address and port of a NAT service that matched no session, passed to the kernel.")
	natNoReply       = desc("xlb_nat_no_reply_total", "NAT sessions that expired without one reply from their backend; with dnat, the backend's route to the client does not go through the node.")
	natFragments     = desc("xlb_nat_fragments_dropped_total", "IP fragments to NAT services, dropped.")
	natICMP          = desc("xlb_nat_icmp_translated_total", "ICMP errors about NAT sessions translated for the other side.")
	l2NodeAlive      = desc("xlb_l2_node_alive", "Layer-2 mode: whether this node counts another node of l2.nodes as alive (1) or not (0).", "node")
	l2Answering      = desc("xlb_l2_vip_answering", "Layer-2 mode: whether this node answers ARP for a VIP (1) or not (0); across the nodes, exactly one should per VIP.", "vip", "owner")
	l2Dropped        = desc("xlb_l2_heartbeats_refused_total", "Layer-2 mode: datagrams refused on the heartbeat port, by reason (malformed, unknown, spoofed).", "reason")
	reconcileSeconds = desc("xlb_reconcile_duration_seconds", "Time taken to bring the data plane in line with the configuration and the backends' health, by what triggered it (config: start or reload; health: a backend's health changed; retry: after a failed apply).", "trigger")
)

// collector turns a Status into metrics at scrape time.
type collector struct{ status StatusFunc }

// Collector returns the collector behind GET /metrics, for tools that list
// or check the agent's metrics (deploy/monitoring's tests read its
// descriptions).
func Collector(status StatusFunc) prometheus.Collector { return collector{status} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{buildInfo, dataplaneInfo, configGeneration, lastReloadOK, lastReloadTime, reloadsTotal,
		svcPackets, svcBytes, svcRangeDrops, svcRangeBytes, denyPrefixes, conntrackFlows, conntrackSize, bePackets, beBytes, reasonPackets, serviceUp, backendUp, checkDuration, reconcileSeconds, bgpPeerUp, bgpPeerFlaps, bgpPeerGR,
		bgpPeerReceived, bgpPeerMax, bgpPeerOverLimit, bgpRoute, bfdUp, l2NodeAlive, l2Answering, l2Dropped,
		natSessions, natCapacity, natEmbryonic, natAllocFailures, natExpired, natReverseMisses, natNoReply, natFragments, natICMP} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.status()
	if err != nil {
		// A failed scrape is better than one that silently reports zeros:
		// Prometheus marks the target down.
		ch <- prometheus.NewInvalidMetric(configGeneration, fmt.Errorf("collect xlb status: %w", err))
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(buildInfo, 1, st.Version)
	if st.Node.FlowHash != "" {
		gauge(dataplaneInfo, 1, st.Node.FlowHash, fmt.Sprint(st.Node.TableSize))
	}
	gauge(configGeneration, float64(st.Config.Generation))
	gauge(lastReloadOK, boolValue(st.Config.Result == ResultOK))
	if !st.Config.LastReload.IsZero() {
		gauge(lastReloadTime, float64(st.Config.LastReload.UnixMilli())/1000)
	}
	// Both results are always present, so rate() and alerts work from the
	// first scrape on.
	for _, r := range []string{ResultOK, ResultError} {
		count(reloadsTotal, st.Config.Reloads[r], r)
	}
	for _, s := range st.Services {
		count(svcPackets, s.Counters.Packets, s.Name)
		count(svcBytes, s.Counters.Bytes, s.Name)
		gauge(serviceUp, boolValue(s.State != StateDown), s.Name)
		if len(s.SourceRanges) > 0 || s.SourceRangeDrops.Packets > 0 {
			count(svcRangeDrops, s.SourceRangeDrops.Packets, s.Name)
			count(svcRangeBytes, s.SourceRangeDrops.Bytes, s.Name)
		}
		for _, b := range s.Backends {
			be := netip.AddrPortFrom(b.Address, b.Port).String()
			count(bePackets, b.Counters.Packets, s.Name, be)
			count(beBytes, b.Counters.Bytes, s.Name, be)
			gauge(backendUp, boolValue(b.Health.State != StateDown), s.Name, be)
			if !b.Health.LastCheck.IsZero() {
				gauge(checkDuration, b.Health.LatencyMs/1000, s.Name, be)
			}
		}
	}
	for r, n := range st.Reasons {
		count(reasonPackets, n, r)
	}
	gauge(denyPrefixes, float64(st.Policy.DenyPrefixes))
	gauge(conntrackFlows, float64(st.Conntrack.Flows))
	gauge(conntrackSize, float64(st.Conntrack.Size))
	// Present while a service has forwarding nat or dnat.
	if n := st.NAT; n != nil {
		gauge(natSessions, float64(n.Sessions))
		gauge(natCapacity, float64(n.Capacity))
		gauge(natEmbryonic, float64(n.Embryonic))
		count(natAllocFailures, n.AllocFailures)
		count(natExpired, n.Expired)
		count(natReverseMisses, n.ReverseMisses)
		count(natNoReply, n.NoReply)
		count(natFragments, n.FragmentsDropped)
		count(natICMP, n.ICMPTranslated)
	}
	if b := st.BGP; b != nil {
		for _, p := range b.Peers {
			gauge(bgpPeerUp, boolValue(p.State == "established"), p.Address.String())
			count(bgpPeerFlaps, uint64(p.Flaps), p.Address.String())
			if p.PrefixesReceived != nil {
				gauge(bgpPeerReceived, float64(*p.PrefixesReceived), p.Address.String())
			}
			gauge(bgpPeerMax, float64(p.MaxPrefixes), p.Address.String())
			gauge(bgpPeerOverLimit, boolValue(p.PrefixLimit != nil), p.Address.String())
			if g := p.GracefulRestart; g != nil {
				gauge(bgpPeerGR, boolValue(g.Negotiated != nil && *g.Negotiated), p.Address.String())
			}
			if p.BFD != nil {
				gauge(bfdUp, boolValue(p.BFD.State == "up"), p.Address.String())
			}
		}
		for _, r := range b.Routes {
			gauge(bgpRoute, boolValue(r.Announced), r.Prefix.String())
		}
	}
	if l := st.L2; l != nil {
		for _, n := range l.Nodes {
			gauge(l2NodeAlive, boolValue(n.Alive), n.Name)
		}
		for _, v := range l.VIPs {
			gauge(l2Answering, boolValue(v.Answering), v.VIP.String(), v.Owner)
		}
		for reason, n := range l.Dropped {
			count(l2Dropped, n, reason)
		}
	}
	for trigger, r := range st.Reconciles {
		buckets := make(map[float64]uint64, len(r.Buckets))
		for _, b := range r.Buckets {
			buckets[b.Le] = b.Count
		}
		ch <- prometheus.MustNewConstHistogram(reconcileSeconds, r.Count, r.SumSeconds, buckets, trigger)
	}
}

func metricsHandler(status StatusFunc) http.Handler {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collector{status})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
