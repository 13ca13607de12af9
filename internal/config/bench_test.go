package config

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseLarge parses a file of 1000 services × 100 backends (3.2
// MiB, as bench/ctlbench writes it). Most of the time is the YAML
// library's parse into nodes (about two thirds in a profile of
// 2026-11-27), not the checks.
func BenchmarkParseLarge(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("node: {interface: eth0}\ndataplane: {maxBackends: 101024}\nservices:\n")
	for i := range 1000 {
		fmt.Fprintf(&sb, "  - name: s%d\n    vip: 10.100.%d.%d\n    port: %d\n    backends:\n", i, i/100/250, 1+i/100%250, 8000+i%100)
		for j := range 100 {
			fmt.Fprintf(&sb, "      - {address: 10.%d.%d.%d}\n", 1+i/250, i%250, 1+j)
		}
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("x.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
