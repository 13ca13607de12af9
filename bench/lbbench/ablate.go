package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/xlbproject/xlb/bench/internal/lbharness"
)

// An ablation is the LB path with one part taken out: a patch of
// bench/lbbench/ablations applied to a copy of bpf/, built like `make
// generate` builds bench_floors.c, and measured as an A/B run (RunAB)
// beside the real path and floor 2, interleaved on the same maps. What
// the real path loses without the part is what the part costs. The
// patches are diffs against bpf/: a change there that breaks one fails
// TestAblationPatchesBuild.
type ablation struct {
	Patch string `json:"patch"`
	// What is the patch's first line: what it takes out.
	What string `json:"what"`
	// LBNs and FloorNs are the real path's and floor 2's best rounds in
	// this A/B run; WithoutNs the ablated path's.
	LBNs      float64 `json:"lb_min_ns"`
	FloorNs   float64 `json:"floor_min_ns"`
	WithoutNs float64 `json:"without_min_ns"`
	// SavedNs is the median over rounds of the real path's round less
	// the ablated one's in the same round.
	SavedNs float64 `json:"saved_ns_paired"`
	// WithoutOverFloor is the ablated path over floor 2, paired rounds.
	WithoutOverFloor float64 `json:"without_over_floor_paired"`
	// FloorMoved is the ablated object's floor 2 over the real one's,
	// paired: a patch leaves the floor alone, so about 1.
	FloorMoved float64 `json:"other_floor_over_floor_paired"`
	// Failed is why the ablated object did not load ("" if it did): the
	// verifier refuses a build whose changed code takes more stack, and
	// one such patch should not cost the run the others.
	Failed string `json:"failed,omitempty"`
}

// runAblations measures every patch in dir (in name order) against the
// sources in bpfDir.
func runAblations(dir, bpfDir string, cfg lbharness.BenchConfig) ([]ablation, error) {
	patches, err := filepath.Glob(filepath.Join(dir, "*.patch"))
	if err != nil || len(patches) == 0 {
		return nil, fmt.Errorf("no ablation patches in %s", dir)
	}
	slices.Sort(patches)
	var out []ablation
	for _, p := range patches {
		a, err := runAblation(p, bpfDir, cfg)
		var notLoaded *lbharness.LoadError
		if errors.As(err, &notLoaded) {
			a = ablation{Patch: strings.TrimSuffix(filepath.Base(p), ".patch"), What: a.What, Failed: notLoaded.Error()}
			fmt.Printf("  without %-52s does not load: %v\n", a.Patch, notLoaded)
			out = append(out, a)
			continue
		}
		if err != nil {
			return nil, err
		}
		fmt.Printf("  without %-52s %6.1f ns (real path %.1f ns): %+.1f ns paired\n", a.Patch, a.WithoutNs, a.LBNs, -a.SavedNs)
		out = append(out, a)
	}
	return out, nil
}

func runAblation(patch, bpfDir string, cfg lbharness.BenchConfig) (ablation, error) {
	tmp, err := os.MkdirTemp("", "xlb-ablation-")
	if err != nil {
		return ablation{}, err
	}
	defer os.RemoveAll(tmp)
	what, obj, err := buildAblation(patch, bpfDir, tmp)
	if err != nil {
		return ablation{}, err
	}
	res, err := lbharness.RunAB(cfg, obj)
	if err != nil {
		return ablation{What: what}, fmt.Errorf("%s: %w", filepath.Base(patch), err)
	}
	by := map[string]lbharness.BenchResult{}
	for _, x := range res {
		by[x.Name] = x
	}
	lb, floor, other, otherFloor := by[lbharness.ABLB], by[lbharness.ABFloor], by[lbharness.ABOtherLB], by[lbharness.ABOtherFloor]
	return ablation{
		Patch: strings.TrimSuffix(filepath.Base(patch), ".patch"), What: what,
		LBNs: lb.MinNs, FloorNs: floor.MinNs, WithoutNs: other.MinNs,
		SavedNs:          lbharness.PairedDiff(lb.RoundsNs, other.RoundsNs),
		WithoutOverFloor: lbharness.PairedRatio(other.RoundsNs, floor.RoundsNs),
		FloorMoved:       lbharness.PairedRatio(otherFloor.RoundsNs, floor.RoundsNs),
	}, nil
}

// buildAblation copies the sources of bpfDir to dir/bpf, applies patch
// there and builds dir/bpf/bench_floors.c. It returns the patch's first
// line and the object's path.
func buildAblation(patch, bpfDir, dir string) (string, string, error) {
	name := filepath.Base(patch)
	text, err := os.ReadFile(patch)
	if err != nil {
		return "", "", err
	}
	what, _, _ := strings.Cut(string(text), "\n")
	if strings.HasPrefix(what, "diff ") || strings.TrimSpace(what) == "" {
		return "", "", fmt.Errorf("%s: the first line must say what the patch takes out", name)
	}
	src := filepath.Join(dir, "bpf")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", "", err
	}
	files, err := os.ReadDir(bpfDir)
	if err != nil {
		return "", "", err
	}
	for _, f := range files {
		if f.IsDir() || !(strings.HasSuffix(f.Name(), ".c") || strings.HasSuffix(f.Name(), ".h")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(bpfDir, f.Name()))
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(src, f.Name()), b, 0o644); err != nil {
			return "", "", err
		}
	}
	abs, err := filepath.Abs(patch)
	if err != nil {
		return "", "", err
	}
	// Outside a repository, git apply patches the files under its
	// working directory, as patch -p1 would. The ceiling keeps it from
	// finding one above dir (a TMPDIR inside a checkout), where it would
	// patch paths from that repository's top instead.
	apply := exec.Command("git", "apply", abs)
	apply.Dir = dir
	apply.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	if out, err := apply.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("%s no longer applies to %s (update it with the sources): %v: %s", name, bpfDir, err, out)
	}
	obj := filepath.Join(dir, "bench.o")
	// The flags of bench_floors.c's go:generate line (bench/internal/lbharness/gen.go).
	cc := exec.Command("clang", "-O2", "-mcpu=v3", "-g", "-Wall", "-Werror", "-target", "bpf",
		"-I"+src, "-I/usr/include/"+multiarch(), "-c", filepath.Join(src, "bench_floors.c"), "-o", obj)
	if out, err := cc.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("%s: build: %v: %s", name, err, out)
	}
	return strings.TrimSpace(what), obj, nil
}

// multiarch is Debian's directory for this machine's asm/ headers.
func multiarch() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

const (
	ablateBegin = "<!-- lbbench-ablate:begin (generated by `make bench`; do not edit by hand) -->"
	ablateEnd   = "<!-- lbbench-ablate:end -->"
)

// ablateSection is the document's table of the ablations of r.
func ablateSection(r report, jsonName string) string {
	var t strings.Builder
	fmt.Fprintf(&t, "%s\n\n%s; %d backends, %d rounds of %d runs per variant, each interleaved with the real path and floor 2 on the same maps. Raw data: `bench/results/%s` (`ablations`).\n\n",
		ablateBegin, r.docLine(), r.Backends, r.Rounds, r.Repeat, jsonName)
	t.WriteString("| taken out | patch | LB path without it, best round (ns) | real path, best round (ns) | saved (ns, median of paired rounds) | without it / floor 2 (paired) |\n|---|---|---:|---:|---:|---:|\n")
	for _, a := range r.Ablations {
		if a.Failed != "" {
			fmt.Fprintf(&t, "| %s | `%s` | does not load: %s | | | |\n", a.What, a.Patch, strings.ReplaceAll(a.Failed, "|", "/"))
			continue
		}
		fmt.Fprintf(&t, "| %s | `%s` | %.0f | %.0f | %.1f | %.2fx |\n", a.What, a.Patch, a.WithoutNs, a.LBNs, a.SavedNs, a.WithoutOverFloor)
	}
	if floor := r.byName("floor_parse_encap").MinNs; floor > 0 {
		fmt.Fprintf(&t, "\nThe %.2fx target leaves the LB path %.1f ns over this run's floor 2 (%.0f ns) on best rounds; the real path takes %.0f ns more.\n",
			r.Target, (r.Target-1)*floor, floor, r.byName("bench_lb").MinNs-floor)
	}
	t.WriteString("\n" + ablateEnd)
	return t.String()
}

// byName is r's result for a program, or a zero one.
func (r report) byName(name string) lbharness.BenchResult {
	for _, x := range r.Results {
		if x.Name == name {
			return x
		}
	}
	return lbharness.BenchResult{}
}
