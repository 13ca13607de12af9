package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// proberArgs run the health package's prober benchmark: 1000 targets
// probed every second, CPU measured over 10 one-second iterations.
var proberArgs = []string{"test", "-run", "^$", "-bench", "Prober1000", "-benchtime", "10x", "-count", "1", "./internal/health/"}

// ProberResult is the prober's CPU use for 1000 backends at 1 s.
type ProberResult struct {
	Command string `json:"command"`
	// Metrics by check type (tcp, http), then by unit (cpu-ms/s,
	// sys-ms/s, probes/s, ...).
	Metrics map[string]map[string]float64 `json:"metrics"`
	Output  string                        `json:"output"`
}

// runProber runs the benchmark with the go command in dir (the module's
// root) and parses its result lines.
func runProber(ctx context.Context, goCmd, dir string) (*ProberResult, error) {
	cmd := exec.CommandContext(ctx, goCmd, proberArgs...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	res := &ProberResult{Command: goCmd + " " + strings.Join(quoteArgs(proberArgs), " ")}
	err := cmd.Run()
	res.Output = out.String()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", res.Command, err, res.Output)
	}
	res.Metrics = parseBench(res.Output, "BenchmarkProber1000/")
	for _, typ := range []string{"tcp", "http"} {
		if _, ok := res.Metrics[typ][cpuUnit]; !ok {
			return nil, fmt.Errorf("%s: no %s figure for %s in its output:\n%s", res.Command, cpuUnit, typ, res.Output)
		}
	}
	return res, nil
}

// cpuUnit is the prober benchmark's headline metric: CPU milliseconds per
// wall-clock second.
const cpuUnit = "cpu-ms/s"

// parseBench reads `go test -bench` result lines of the benchmarks named
// prefix+SUB (with an optional -GOMAXPROCS suffix) into metrics by SUB
// and unit. A line is the name, the iteration count, then value-unit
// pairs; anything else is skipped.
func parseBench(out, prefix string) map[string]map[string]float64 {
	res := map[string]map[string]float64{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := strings.TrimPrefix(f[0], prefix)
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			m[f[i+1]] = v
		}
		res[name] = m
	}
	return res
}

// quoteArgs quotes the arguments a shell would split or expand.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$* ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}
