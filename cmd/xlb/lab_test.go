package main

import "testing"

// `xlb lab up` is dual stack by default, IPv4 only with what has no
// IPv6 yet, and --ipv6 given always wins.
func TestLabIPv6Default(t *testing.T) {
	for _, c := range []struct {
		name           string
		ipv6, given    bool
		pods           int
		plain, reflect bool
		want           bool
	}{
		{"default", true, false, 0, false, false, true},
		{"--ipv6=false", false, true, 0, false, false, false},
		{"--pods 2", true, false, 2, false, false, false},
		{"--plain-backends", true, false, 0, true, false, true},
		{"--reflector", true, false, 0, false, true, false},
		{"--reflector --ipv6", true, true, 0, false, true, true},
	} {
		if got := labIPv6(c.ipv6, c.given, c.pods, c.reflect); got != c.want {
			t.Errorf("%s: dual stack %v, want %v", c.name, got, c.want)
		}
	}
}
