package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xlbproject/xlb/internal/k8s/allocator"
)

// Metrics are the controller's Prometheus metrics.
type Metrics struct {
	allocations prometheus.Counter
	releases    prometheus.Counter
	failures    *prometheus.CounterVec
	conflicts   prometheus.Counter
	poolSize    *prometheus.GaugeVec
	poolUsed    *prometheus.GaugeVec
	leader      prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		allocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xlb_controller_allocations_total",
			Help: "Addresses given to Services (a Service moving to a requested address counts again).",
		}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xlb_controller_releases_total",
			Help: "Addresses taken back from Services deleted or no longer served.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xlb_controller_allocation_failures_total",
			Help: "Allocation failures reported to Services as AllocationFailed Events, by reason.",
		}, []string{"reason"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xlb_controller_write_conflicts_total",
			Help: "Writes refused because the object changed since it was read; each is retried.",
		}),
		poolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xlb_controller_pool_addresses",
			Help: "Addresses an address pool hands out.",
		}, []string{"pool"}),
		poolUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xlb_controller_pool_addresses_assigned",
			Help: "Addresses of an address pool that Services hold.",
		}, []string{"pool"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xlb_controller_leader",
			Help: "1 while this instance holds the leader Lease and allocates, else 0.",
		}),
	}
	for _, c := range []prometheus.Collector{m.allocations, m.releases, m.failures, m.conflicts, m.poolSize, m.poolUsed, m.leader} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// The methods accept a nil *Metrics, so that the controller runs without.

func (m *Metrics) allocated() {
	if m != nil {
		m.allocations.Inc()
	}
}

func (m *Metrics) released() {
	if m != nil {
		m.releases.Inc()
	}
}

func (m *Metrics) failed(r allocator.Reason) {
	if m != nil {
		m.failures.WithLabelValues(string(r)).Inc()
	}
}

func (m *Metrics) conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

func (m *Metrics) setLeader(on bool) {
	if m == nil {
		return
	}
	if on {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// setPools replaces the pool gauges with the allocator's pools.
func (m *Metrics) setPools(a *allocator.Allocator) {
	if m == nil {
		return
	}
	m.poolSize.Reset()
	m.poolUsed.Reset()
	for _, p := range a.Pools() {
		used, size, _ := a.Usage(p.Name)
		m.poolSize.WithLabelValues(p.Name).Set(float64(size))
		m.poolUsed.WithLabelValues(p.Name).Set(float64(used))
	}
}
