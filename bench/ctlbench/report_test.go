package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// TestRewriteDocIdempotent: rewriting twice gives the same document, and
// the text around the section survives.
func TestRewriteDocIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	head := "# Benchmarks\n\n<!-- lbbench:begin -->\nLB table\n<!-- lbbench:end -->\n"
	if err := os.WriteFile(path, []byte(head), 0o644); err != nil {
		t.Fatal(err)
	}
	r := sampleReport()
	for i := range 2 {
		if err := benchutil.RewriteDoc(path, docBegin, docEnd, markdown(r, "bench/results/ctl-x.json", "img/bench-ctl.svg")); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		s := string(b)
		if !strings.HasPrefix(s, head) || strings.Count(s, docBegin) != 1 || strings.Count(s, docEnd) != 1 {
			t.Fatalf("rewrite %d:\n%s", i+1, s)
		}
	}
}

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
	out := plot(sampleReport())
	d := xml.NewDecoder(strings.NewReader(out))
	paths := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("not well-formed: %v\n%s", err, out)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	if paths != 4 {
		t.Errorf("%d paths, want 4 (two series per panel)", paths)
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

func TestCDFPoints(t *testing.T) {
	got := cdfPoints([]float64{3, 1, 3, 2})
	want := [][2]float64{{1, 0.25}, {2, 0.5}, {3, 1}}
	if len(got) != len(want) {
		t.Fatalf("cdfPoints = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cdfPoints[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
