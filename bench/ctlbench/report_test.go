package main

import (
	"strings"
	"testing"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

func sampleReport() *Report {
	return &Report{
		Date: "2026-11-22T00:00:00Z", Machine: benchutil.Machine{CPU: "test CPU", CPUs: 2, MemMiB: 1024, Kernel: "6.1", Go: "go1.26"},
		TargetExcessMs: 100,
		Failover: &FailoverResult{
			Check: CheckParams{Type: "http", IntervalMs: 200, TimeoutMs: 150, Rise: 2, Fall: 2}, Backends: 3, DetectMs: 400, RecoverMs: 400,
			Removal: benchutil.Summarize([]float64{250, 380, 530}), RemovalExcess: benchutil.Summarize([]float64{-150, -20, 130}),
			Events: []FailoverEvent{{RemovalMs: 250, ReturnMs: 300}, {RemovalMs: 380, ReturnMs: 390}, {RemovalMs: 530, ReturnMs: 410}},
		},
		Reload: &ReloadResult{FilePollMs: 500, Modes: []ReloadMode{
			{Mode: modeFile, SamplesMs: []float64{20, 300}, Update: benchutil.Summarize([]float64{20, 300}), Triggers: map[string]int{"file changed": 2}},
			{Mode: modeSIGHUP, SamplesMs: []float64{3, 5}, Update: benchutil.Summarize([]float64{3, 5}), Triggers: map[string]int{"SIGHUP": 2}},
		}},
	}
}

// TestMarkdownVerdict: the target verdict follows the measured p99 excess.
func TestMarkdownVerdict(t *testing.T) {
	r := sampleReport()
	if md := markdown(r, "x.json", ""); !strings.Contains(md, "**misses** it: p99 is 130 ms beyond") {
		t.Errorf("p99 excess 130 ms against a 100 ms target:\n%s", md)
	}
	if err := benchutil.CheckSection(markdown(r, "x.json", "img/bench-ctl.svg"), docBegin, docEnd); err != nil {
		t.Error(err)
	}
	r.Failover.RemovalExcess = benchutil.Summarize([]float64{-150, -20, 40})
	md := markdown(r, "x.json", "")
	if !strings.Contains(md, "**meets** it: p99 is 40 ms beyond") {
		t.Errorf("p99 excess 40 ms against a 100 ms target:\n%s", md)
	}
	if !strings.Contains(md, "picked up by the stat poll") || !strings.Contains(md, "| file write + SIGHUP | 2 | 3.0 | 5.0 | 5.0 | 5.0 | SIGHUP: 2 |") {
		t.Errorf("reload section:\n%s", md)
	}
	if strings.Contains(md, "![") {
		t.Errorf("an image link without a plot:\n%s", md)
	}
	if strings.Contains(md, "reloads twice") {
		t.Errorf("a double reload without an inotify trigger:\n%s", md)
	}
	r.Reload.Modes[1].Triggers[triggerWatch] = 2
	if md := markdown(r, "x.json", ""); !strings.Contains(md, "reloads twice") {
		t.Errorf("SIGHUP mode with inotify reloads too, and no word of it:\n%s", md)
	}
}

// TestPlotIsSVG: the plot is well-formed XML with one path per series.
func TestPlotIsSVG(t *testing.T) {
	if n, err := benchutil.SVGElements(plot(sampleReport())); err != nil || n["path"] != 4 {
		t.Errorf("%d paths (%v), want 4: two series per panel", n["path"], err)
	}
}

func TestCountTriggers(t *testing.T) {
	log := `time=2026-11-22T04:10:55Z level=INFO msg="configuration reloaded" path=/x.yaml trigger="file changed" generation=2 services=1
time=2026-11-22T04:10:56Z level=INFO msg="configuration reloaded" path=/x.yaml trigger=SIGHUP generation=3 services=1
time=2026-11-22T04:10:57Z level=INFO msg="configuration reloaded" path=/x.yaml trigger="file written" generation=4 services=1
time=2026-11-22T04:10:58Z level=INFO msg="configuration reloaded" path=/x.yaml trigger=SIGHUP generation=5 services=1
time=2026-11-22T04:10:59Z level=ERROR msg="configuration reload failed; the previous configuration keeps running" trigger=SIGHUP
time=2026-11-22T04:11:00Z level=INFO msg="configuration reloaded" path=/x.yaml generation=6
`
	got := countTriggers(log)
	want := map[string]int{"file changed": 1, "SIGHUP": 2, "file written": 1, "?": 1}
	if len(got) != len(want) {
		t.Fatalf("countTriggers = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("countTriggers[%q] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
