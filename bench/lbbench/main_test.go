package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/bench/internal/lbharness"
)

// TestBackendSection: the generated backend section carries its markers
// once each, so that the next run finds and replaces it, and the LB
// section's markers never, so that it cannot take that section's place.
func TestBackendSection(t *testing.T) {
	r := report{Backend: backendReport{
		Results: []lbharness.DecapBenchResult{{Name: caseGUE, MinNs: 100}, {Name: caseSocket, MinNs: 180}},
		OverGUE: map[string]ratio{caseSocket: {Raw: 1.8}},
	}}
	s := backendSection(r, "lb-x.json")
	if err := benchutil.CheckSection(s, backendBegin, backendEnd); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s, docBegin) || strings.Contains(s, docEnd) {
		t.Errorf("the backend section contains the LB section's markers:\n%s", s)
	}
	if !strings.Contains(s, "| `gue_hint_socket` | 180 |") || !strings.Contains(s, "**1.80x**") {
		t.Errorf("section:\n%s", s)
	}
}

// TestMatrixSection: the matrix section carries its markers once each,
// a row per case, the worst hit's ratio against the target, and the
// plot's link relative to the document.
func TestMatrixSection(t *testing.T) {
	hit := func(proto string, b, s int, lb, floor float64) lbharness.MatrixResult {
		return lbharness.MatrixResult{MatrixCase: lbharness.MatrixCase{Proto: proto, Backends: b, Services: s},
			LB: lbharness.BenchResult{MinNs: lb, MedianNs: lb + 1}, Floor: lbharness.BenchResult{MinNs: floor}, Ratio: lb / floor, Paired: lb / floor * 1.01, Mpps: 1e3 / lb}
	}
	r := report{Target: 1.3, Matrix: []lbharness.MatrixResult{
		hit("tcp", 16, 1, 58, 45), hit("udp", 1024, 1000, 60, 45),
		{MatrixCase: lbharness.MatrixCase{Proto: "tcp", Services: 1000, Miss: true}, LB: lbharness.BenchResult{MinNs: 30}, Floor: lbharness.BenchResult{MinNs: 27}, Ratio: 30.0 / 27},
	}}
	s := matrixSection(r, "lb-x.json", "docs/img/m.png", "docs/benchmarks.md")
	if err := benchutil.CheckSection(s, matrixBegin, matrixEnd); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| tcp, 16 backends, 1 services | 58 | 59 | 45 (`floor_parse_encap`) | 1.29x | 1.30x | 17.2 | 0 |",
		"| miss (tcp to a non-VIP address), 1000 services | 30 |", "udp, 1024 backends, 1000 services at **1.33x** its floor, beyond the 1.30x target; on paired rounds (the median of each round's LB / floor): udp, 1024 backends, 1000 services at 1.35x",
		"](img/m.png)"} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}

// TestAblationPatchesBuild: every ablation patch still applies to bpf/
// and builds, and says first what it takes out; a change to the LB path
// that a patch no longer fits fails here, not in `make bench`. Each
// patch changes the LB path's instructions (against the same build of
// the unpatched sources), so each takes something out.
func TestAblationPatchesBuild(t *testing.T) {
	for _, tool := range []string{"git", "clang"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	patches, err := filepath.Glob("ablations/*.patch")
	if err != nil || len(patches) < 5 {
		t.Fatalf("ablation patches: %v, %v", patches, err)
	}
	// A patch that changes no source: its LB path is the real one.
	noop := filepath.Join(t.TempDir(), "noop.patch")
	if err := os.WriteFile(noop, []byte("nothing taken out\n\ndiff --git a/bpf/unused.h b/bpf/unused.h\nnew file mode 100644\n--- /dev/null\n+++ b/bpf/unused.h\n@@ -0,0 +1 @@\n+/* unused */\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	real := lbInstructions(t, noop)
	if again := lbInstructions(t, noop); !bytes.Equal(again, real) {
		t.Fatal("two builds of the same sources differ: the comparison below would mean nothing")
	}
	for _, p := range patches {
		if bytes.Equal(lbInstructions(t, p), real) {
			t.Errorf("%s: the LB path is the real one's: the patch takes nothing out", p)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.patch")
	if err := os.WriteFile(bad, []byte("diff --git a/bpf/x b/bpf/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := buildAblation(bad, "../../bpf", t.TempDir()); err == nil || !strings.Contains(err.Error(), "first line") {
		t.Errorf("a patch without a description: %v", err)
	}
}

// lbInstructions builds patch over bpf/ and returns bench_lb's
// instructions as bytes (the object itself differs from build to build:
// its debug information names the temporary directory).
func lbInstructions(t *testing.T, patch string) []byte {
	t.Helper()
	what, obj, err := buildAblation(patch, "../../bpf", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if what == "" {
		t.Errorf("%s: no description", patch)
	}
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	prog, ok := spec.Programs["bench_lb"]
	if !ok {
		t.Fatalf("%s: no bench_lb", patch)
	}
	var b bytes.Buffer
	if err := prog.Instructions.Marshal(&b, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestAblateSection: the section carries its markers, a row per
// ablation and the target's budget over the floor.
func TestAblateSection(t *testing.T) {
	r := report{Target: 1.3, Backends: 16, Rounds: 3, Repeat: 10,
		Results: []lbharness.BenchResult{{Name: "floor_parse_encap", MinNs: 16}, {Name: "bench_lb", MinNs: 32}},
		Ablations: []ablation{{Patch: "1-svc", What: "The service lookup", WithoutNs: 29, LBNs: 32, SavedNs: 3.5, WithoutOverFloor: 1.76},
			{Patch: "2-hash", What: "The flow hash", Failed: "combined stack size of 3 calls is 528. Too large"}}}
	s := ablateSection(r, "lb-x.json")
	if err := benchutil.CheckSection(s, ablateBegin, ablateEnd); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| The service lookup | `1-svc` | 29 | 32 | 3.5 | 1.76x |", "| The flow hash | `2-hash` | does not load: combined stack size of 3 calls is 528. Too large | | | |", "leaves the LB path 4.8 ns over this run's floor 2 (16 ns) on best rounds; the real path takes 16 ns more"} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}

// TestPolicyPlotFollowsPNG: the policy cases' plot goes beside -png's,
// and -png "" writes no plot at all (it used to rewrite the tracked
// docs/img/bench-lb-policy.png regardless).
func TestPolicyPlotFollowsPNG(t *testing.T) {
	t.Chdir(t.TempDir())
	r := report{Policy: &lbharness.PolicyReport{}}
	for _, name := range []string{"bench_lb", "floor_deny_table", "floor_deny_lpm"} {
		for i, n := range []int{1, 100, 10000} {
			r.Policy.Results = append(r.Policy.Results, lbharness.PolicyResult{BenchResult: lbharness.BenchResult{Name: name, MinNs: float64(40 + i)}, Prefixes: n})
		}
	}
	pngs := func() []string {
		var out []string
		err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, ".png") {
				out = append(out, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		png  string
		want []string
	}{
		{"", nil},
		{"docs/img/bench-lb-matrix.png", []string{"docs/img/bench-lb-policy.png"}},
		{"elsewhere/m.png", []string{"docs/img/bench-lb-policy.png", "elsewhere/bench-lb-policy.png"}},
	} {
		writePolicy(r, "results", "", policyPlotPath(tc.png))
		if got := pngs(); !slices.Equal(got, tc.want) {
			t.Errorf("-png %q: the plots are %v, want %v", tc.png, got, tc.want)
		}
	}
}

// TestNATFullLine: the LB section says what the full-table NAT cases
// measured against the one-session ones, each net of its own harness, and
// says nothing of them in a run without them.
func TestNATFullLine(t *testing.T) {
	res := func(name string, min float64, rounds ...float64) lbharness.BenchResult {
		return lbharness.BenchResult{Name: name, MinNs: min, RoundsNs: rounds}
	}
	r := report{NATSessions: 200000, Results: []lbharness.BenchResult{
		res("wrap_only", 10, 10, 11), res("bench_lb_nat_fwd", 80, 80, 81), res("bench_lb_nat_rev", 50, 50, 51),
		res("wrap_pick", 14, 14, 15), res("bench_lb_nat_fwd_full", 400, 400, 401), res("bench_lb_nat_rev_full", 300, 300, 301),
	}}
	for i := range r.Results {
		r.Results[i].NetNs = r.Results[i].MinNs - 10
		if strings.HasSuffix(r.Results[i].Name, "_full") {
			r.Results[i].NetNs = r.Results[i].MinNs - 14
		}
	}
	line := r.natFullLine()
	for _, want := range []string{"200000 established sessions", "client to backend 70 / **386 ns**", "backend to client 40 / **286 ns**", "320 and 250 ns", "of which 4 ns"} {
		if !strings.Contains(line, want) {
			t.Errorf("line lacks %q:\n%s", want, line)
		}
	}
	r.Results = r.Results[:3]
	if line := r.natFullLine(); line != "" {
		t.Errorf("a run without the full-table cases: %q, want nothing", line)
	}
}
