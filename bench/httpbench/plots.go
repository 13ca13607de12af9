package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/bench/internal/bwmodel"
	"github.com/xlbproject/xlb/bench/internal/pngplot"
)

// Plot files, in the image directory.
const (
	imgKeepAlive = "bench-http-rps-keepalive.png"
	imgClose     = "bench-http-rps-newconn.png"
	imgLatency   = "bench-http-latency.png"
	imgModel     = "bench-http-model.png"
)

// writeViews writes the plots into dir img (none if "") and the section
// of doc (none if ""), for r whose JSON is at jsonPath.
func writeViews(r *Report, jsonPath, img, doc string, progress func(string, ...any)) error {
	var links images
	if img != "" {
		if err := os.MkdirAll(img, 0o755); err != nil {
			return err
		}
		link := func(name string) string { return benchutil.DocLink(doc, filepath.Join(img, name)) }
		plots := []struct {
			name string
			link *string
			draw func(string) error
		}{
			{imgKeepAlive, &links.KeepAlive, func(p string) error { return r.plotRPS(p, modeKeepAlive) }},
			{imgClose, &links.Close, func(p string) error { return r.plotRPS(p, modeClose) }},
			{imgLatency, &links.Latency, r.plotLatency},
			{imgModel, &links.Model, r.plotModel},
		}
		for _, pl := range plots {
			path := filepath.Join(img, pl.name)
			if err := pl.draw(path); err != nil {
				if errors.Is(err, errNoData) {
					continue
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			*pl.link = link(pl.name)
			progress("wrote %s", path)
		}
	}
	if doc == "" {
		return nil
	}
	if err := benchutil.RewriteDoc(doc, docBegin, docEnd, markdown(r, filepath.ToSlash(jsonPath), links)); err != nil {
		return err
	}
	progress("updated %s", doc)
	return nil
}

// errNoData: a plot without anything to show is not written.
var errNoData = errors.New("no data")

// plotRPS is the grouped bars of Figure 4.6: requests per second of each
// path, a group per backend count.
func (r *Report) plotRPS(path, mode string) error {
	if !slices.Contains(r.Modes, mode) {
		return errNoData
	}
	var groups []string
	for _, n := range r.BackendCounts {
		groups = append(groups, backendsLabel(n))
	}
	var series []pngplot.BarSeries
	for _, p := range r.Paths {
		if isV6(p.Key) {
			continue // the IPv4 paths only: the palette has 8 colours; the tables show IPv6
		}
		s := pngplot.BarSeries{Name: p.Name}
		for _, n := range r.BackendCounts {
			s.Values = append(s.Values, r.bestRPS(p.Key, mode, n))
		}
		series = append(series, s)
	}
	title := "Keep-alive: HTTP requests/s"
	if mode == modeClose {
		title = "New connection per request: HTTP requests/s"
	}
	return pngplot.Bars(path, title, "requests/s (best round)", groups, series)
}

// plotLatency is p50 (solid) and p99 (dashed) against the offered rate,
// per path: the shape of Figure 4.7.
func (r *Report) plotLatency(path string) error {
	if len(r.Latency) == 0 {
		return errNoData
	}
	// p50 solid first, then p99 dashed, path by path in the same order.
	var p50s, p99s []pngplot.Line
	for _, key := range latencyPaths {
		var x, p50, p99 []float64
		for _, l := range r.Latency {
			if l.Path == key && l.OK > 0 && !l.Discarded {
				x, p50, p99 = append(x, l.Rate), append(p50, math.Max(l.P50Ms, 0.001)), append(p99, math.Max(l.P99Ms, 0.001))
			}
		}
		if len(x) == 0 {
			continue
		}
		p50s = append(p50s, pngplot.Line{Name: r.pathName(key) + " p50", X: x, Y: p50})
		p99s = append(p99s, pngplot.Line{Name: r.pathName(key) + " p99", X: x, Y: p99, Dashed: true})
	}
	lines := append(p50s, p99s...)
	if len(lines) == 0 {
		return errNoData
	}
	title := fmt.Sprintf("Latency, new connection per request, %d backends", r.LatencyBackends)
	return pngplot.Lines(path, title, "offered requests/s", "latency (ms)", lines, pngplot.Options{LogY: true})
}

// plotModel is the measured keep-alive rates against the backend count
// beside the bandwidth model's ceilings at 1 and 10 Gbit/s.
func (r *Report) plotModel(path string) error {
	if !slices.Contains(r.Modes, modeKeepAlive) || len(r.BackendCounts) == 0 {
		return errNoData
	}
	var xs []float64
	for _, n := range r.BackendCounts {
		xs = append(xs, float64(n))
	}
	var lines []pngplot.Line
	for _, key := range []string{keyGUE, keyNAT, keyNft, keyNginx, keyDirect} {
		l := pngplot.Line{Name: "measured: " + r.pathName(key), Points: true}
		for _, n := range r.BackendCounts {
			if v := r.bestRPS(key, modeKeepAlive, n); !math.IsNaN(v) && v > 0 {
				l.X, l.Y = append(l.X, float64(n)), append(l.Y, v)
			}
		}
		if len(l.X) > 0 {
			lines = append(lines, l)
		}
	}
	for _, bw := range []float64{1e9, 10e9} {
		for _, m := range []struct {
			name string
			path bwmodel.Path
		}{{"xlb (DSR)", bwmodel.XLBGUE}, {"DNAT / proxy", bwmodel.DNAT}} {
			l := pngplot.Line{Name: fmt.Sprintf("model %g Gbit/s: %s", bw/1e9, m.name), Dashed: true}
			for _, x := range xs {
				l.X, l.Y = append(l.X, x), append(l.Y, r.modelRate(modeKeepAlive, m.path, int(x), bw))
			}
			lines = append(lines, l)
		}
	}
	return pngplot.Lines(path, "Keep-alive: measured vs bandwidth model", "backends", "requests/s", lines,
		pngplot.Options{LogX: true, LogY: true})
}
