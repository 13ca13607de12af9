package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/xlbproject/xlb/bench/internal/pngplot"
	"github.com/xlbproject/xlb/deploy/monitoring"
)

// rateInterval is what Grafana's $__rate_interval is for a 1 s scrape
// interval: four scrapes, and one more for the step.
const rateInterval = 5 * time.Second

// units names the y axis of a panel's unit; percentunit is drawn in %.
var units = map[string]string{
	"pps": "packets/s", "Bps": "bytes/s", "s": "s", "percentunit": "%", "none": "",
}

// cells evaluates every panel of the dashboard over [start, end] at step
// with the PromQL engine and returns what pngplot.Grid draws: a heading
// per row, a value per stat panel, lines per time series and state panel.
func cells(ctx context.Context, d *monitoring.Dashboard, q storage.Queryable, start, end time.Time, step time.Duration) ([]pngplot.Cell, error) {
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples: 10_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		Parser: parser.NewParser(parser.Options{}),
	})
	defer engine.Close()
	var out []pngplot.Cell
	var walk func([]monitoring.Panel) error
	walk = func(ps []monitoring.Panel) error {
		for _, p := range ps {
			g := p.GridPos
			c := pngplot.Cell{X: g.X, Y: g.Y, W: g.W, H: g.H, Title: p.Title}
			switch p.Type {
			case "row":
				c.Heading = true
				out = append(out, c)
				if err := walk(p.Panels); err != nil {
					return err
				}
				continue
			case "stat":
				v, err := instant(ctx, engine, q, p, end)
				if err != nil {
					return err
				}
				c.Value = v
			default:
				lines, err := lines(ctx, engine, q, p, start, end, step)
				if err != nil {
					return err
				}
				c.Lines = lines
				if u := units[p.FieldConfig.Defaults.Unit]; u != "" {
					c.Title += " (" + u + ")"
				}
				scale := 1.0
				if p.FieldConfig.Defaults.Unit == "percentunit" {
					scale = 100
				}
				if p.FieldConfig.Defaults.Min != nil && p.FieldConfig.Defaults.Max != nil {
					lo, hi := *p.FieldConfig.Defaults.Min*scale, *p.FieldConfig.Defaults.Max*scale
					c.YMin, c.YMax = lo-(hi-lo)/20, hi+(hi-lo)/20
				}
				if len(lines) == 0 {
					c.Message = "no data in this run"
				}
			}
			out = append(out, c)
		}
		return nil
	}
	return out, walk(d.Panels)
}

// instant is a stat panel's value at t.
func instant(ctx context.Context, engine *promql.Engine, q storage.Queryable, p monitoring.Panel, t time.Time) (string, error) {
	if len(p.Targets) != 1 {
		return "", fmt.Errorf("panel %q: a stat panel with %d queries", p.Title, len(p.Targets))
	}
	qry, err := engine.NewInstantQuery(ctx, q, nil, monitoring.Expand(p.Targets[0].Expr, rateInterval), t)
	if err != nil {
		return "", fmt.Errorf("panel %q: %w", p.Title, err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return "", fmt.Errorf("panel %q: %w", p.Title, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		return "", fmt.Errorf("panel %q: %w", p.Title, err)
	}
	if len(v) == 0 {
		return "no data", nil
	}
	return strconv.FormatFloat(v[0].F, 'g', 4, 64), nil
}

// lines are a panel's series over [start, end], x in seconds from start.
func lines(ctx context.Context, engine *promql.Engine, q storage.Queryable, p monitoring.Panel, start, end time.Time, step time.Duration) ([]pngplot.Line, error) {
	scale := 1.0
	if p.FieldConfig.Defaults.Unit == "percentunit" {
		scale = 100
	}
	var out []pngplot.Line
	for _, tg := range p.Targets {
		qry, err := engine.NewRangeQuery(ctx, q, nil, monitoring.Expand(tg.Expr, rateInterval), start, end, step)
		if err != nil {
			return nil, fmt.Errorf("panel %q: %w", p.Title, err)
		}
		res := qry.Exec(ctx)
		if res.Err != nil {
			qry.Close()
			return nil, fmt.Errorf("panel %q: %w", p.Title, res.Err)
		}
		m, err := res.Matrix()
		if err != nil {
			qry.Close()
			return nil, fmt.Errorf("panel %q: %w", p.Title, err)
		}
		for _, s := range m {
			l := pngplot.Line{Name: monitoring.Legend(tg.LegendFormat, s.Metric.Map())}
			for _, pt := range s.Floats {
				if math.IsNaN(pt.F) || math.IsInf(pt.F, 0) {
					continue
				}
				l.X = append(l.X, float64(pt.T-start.UnixMilli())/1000)
				l.Y = append(l.Y, pt.F*scale)
			}
			if len(l.X) > 0 {
				out = append(out, l)
			}
		}
		qry.Close()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
