// Package archtest holds the module's import graph to its shape: the
// product (internal/) is built from the product alone. The lab, demo and
// test tooling (testbed/), the benchmarks (bench/) and the end-to-end
// tests (test/) import the product, never the reverse; and README.md's
// layout table names every package of the tree.
package archtest

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/xlbproject/xlb"

// labTrees are the trees the product must not depend on.
var labTrees = []string{module + "/testbed/", module + "/bench/", module + "/test/"}

// product lists the packages of ./internal/... with their direct imports
// and the closure of their dependencies, as go list sees them (test files
// left out: a test may use the lab).
func product(t *testing.T) (imports map[string][]string, deps []string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the import graph: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []string {
		cmd := exec.Command(gobin, args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
		return strings.Fields(strings.TrimSpace(string(out)))
	}
	imports = map[string][]string{}
	for _, line := range strings.Split(strings.Join(run("list", "-f", `{{.ImportPath}}:{{join .Imports ","}}`, "./internal/..."), "\n"), "\n") {
		pkg, imps, _ := strings.Cut(line, ":")
		imports[pkg] = strings.Split(imps, ",")
	}
	return imports, run("list", "-deps", "./internal/...")
}

func inLab(pkg string) bool {
	return slices.ContainsFunc(labTrees, func(tree string) bool { return strings.HasPrefix(pkg, tree) })
}

func TestProductImportsNoLab(t *testing.T) {
	imports, deps := product(t)
	// Not vacuous: the list holds the product's packages and reaches
	// beyond them.
	for _, want := range []string{module + "/internal/agent", module + "/internal/dataplane/lb", "github.com/cilium/ebpf"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("go list -deps ./internal/... has no %s: it did not list the product", want)
		}
	}
	var bad []string
	for _, p := range deps {
		if inLab(p) {
			bad = append(bad, p)
		}
	}
	if len(bad) == 0 {
		return
	}
	// Name the product packages that import the lab directly.
	var via []string
	for pkg, imps := range imports {
		for _, imp := range imps {
			if inLab(imp) {
				via = append(via, pkg+" imports "+imp)
			}
		}
	}
	slices.Sort(via)
	t.Errorf("the product (./internal/...) depends on lab, benchmark or test packages: %s\n%s\nmove what they need into the product, or the code that needs them out of it (testbed/, bench/)",
		strings.Join(bad, ", "), strings.Join(via, "\n"))
}
