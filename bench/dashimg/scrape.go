package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
)

// target is one /metrics endpoint, scraped as Prometheus would with the
// labels job and instance.
type target struct {
	job, instance string
	url           string
	client        *http.Client
}

// unixTarget is an agent's /metrics on its API socket.
func unixTarget(job, instance, socket string) target {
	return target{job: job, instance: instance, url: "http://xlb/metrics", client: &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}}
}

// tcpTarget is a /metrics on a TCP address.
func tcpTarget(job, instance, addr string) target {
	return target{job: job, instance: instance, url: "http://" + addr + "/metrics", client: &http.Client{Timeout: 2 * time.Second}}
}

// scraper scrapes its targets into a TSDB at a fixed interval.
type scraper struct {
	db       *tsdb.DB
	mu       sync.Mutex
	targets  []target
	scrapes  int
	failures map[string]int // by instance: scrapes that failed (e.g. before it started)
}

func (s *scraper) add(t target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.targets = append(s.targets, t)
}

// run scrapes every interval until ctx ends.
func (s *scraper) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.scrapeAll(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *scraper) scrapeAll(ctx context.Context, now time.Time) {
	s.mu.Lock()
	targets := append([]target(nil), s.targets...)
	s.mu.Unlock()
	app := s.db.Appender(ctx)
	for _, t := range targets {
		up := 1.0
		if err := scrape(ctx, t, func(l labels.Labels, v float64) error {
			_, err := app.Append(0, l, now.UnixMilli(), v)
			return err
		}); err != nil {
			up = 0
			s.mu.Lock()
			s.failures[t.instance]++
			s.mu.Unlock()
		}
		if _, err := app.Append(0, labels.FromStrings("__name__", "up", "job", t.job, "instance", t.instance), now.UnixMilli(), up); err != nil {
			_ = app.Rollback()
			return
		}
	}
	if app.Commit() == nil {
		s.mu.Lock()
		s.scrapes++
		s.mu.Unlock()
	}
}

// scrape reads t's metrics and hands each sample to add with t's job and
// instance labels, histograms as their _bucket, _sum and _count series.
func scrape(ctx context.Context, t target, add func(labels.Labels, float64) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", t.url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", t.url, err)
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			base := map[string]string{"job": t.job, "instance": t.instance}
			for _, lp := range m.GetLabel() {
				base[lp.GetName()] = lp.GetValue()
			}
			sample := func(suffix string, v float64, extra ...string) error {
				l := map[string]string{"__name__": name + suffix}
				for k, v := range base {
					l[k] = v
				}
				for i := 0; i+1 < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				return add(labels.FromMap(l), v)
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				err = sample("", m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				err = sample("", m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				err = sample("", m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				inf := false
				for _, b := range h.GetBucket() {
					inf = inf || math.IsInf(b.GetUpperBound(), 1)
					if err = sample("_bucket", float64(b.GetCumulativeCount()), "le", formatLe(b.GetUpperBound())); err != nil {
						break
					}
				}
				if err == nil && !inf {
					err = sample("_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				}
				if err == nil {
					err = sample("_sum", h.GetSampleSum())
				}
				if err == nil {
					err = sample("_count", float64(h.GetSampleCount()))
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func formatLe(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
