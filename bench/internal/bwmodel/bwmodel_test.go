package bwmodel

import (
	"math"
	"testing"
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// The per-request bytes of the dissertation's Tables C.1 and C.2.
func TestDissertationTables(t *testing.T) {
	w := Dissertation(1000)
	if got := w.Request(); !near(got, 227.68, 1e-9) {
		t.Errorf("request bytes %v, want 227.68 (Table C.1: 22,768 per 100 requests)", got)
	}
	if got := w.Response(); !near(got, 1000+437.68, 1e-9) {
		t.Errorf("response bytes %v, want content + 437.68 (Table C.2)", got)
	}
}

// The dissertation's ceilings: IPVS and iptables DNAT on a 1 Gbps node
// at 1e9/8/(content+665.36), about 190k req/s with its tiny responses;
// IPVS-TUN (direct server return) at the client's link instead, "about
// 290K" with 450-byte responses.
func TestDissertationCeilings(t *testing.T) {
	for _, content := range []int{0, 100, 1000, 10000} {
		lowest, _, err := MaxRate(1e9, Dissertation(content), DNAT, 4)
		if err != nil {
			t.Fatal(err)
		}
		want := 1e9 / 8 / (float64(content) + 665.36)
		if lowest.Name != "node" || !near(lowest.Rate, want, 1e-6) {
			t.Errorf("DNAT, content %d: %s at %.1f req/s, want the node at %.1f", content, lowest.Name, lowest.Rate, want)
		}
	}
	if lowest, _, _ := MaxRate(1e9, Dissertation(0), DNAT, 4); !near(lowest.Rate, 187868, 1) {
		t.Errorf("DNAT with an empty body: %.0f req/s, want 187,868 (the measured ~190k)", lowest.Rate)
	}
	tun, _, err := MaxRate(1e9, Dissertation(12), XLBIPIP, 4)
	if err != nil {
		t.Fatal(err)
	}
	if tun.Name != "client" || !near(tun.Rate, 1e9/8/449.68, 1e-6) || tun.Rate < 270e3 || tun.Rate > 290e3 {
		t.Errorf("direct server return, 450-byte responses: %s at %.0f req/s, want the client's link at about 278k", tun.Name, tun.Rate)
	}
}

// Direct server return takes the responses off the node: its ceiling is
// above DNAT's and, for the node, falls with the tunnel's bytes.
func TestPathsOrder(t *testing.T) {
	w := Dissertation(1000)
	node := func(p Path) float64 {
		_, links, err := MaxRate(10e9, w, p, 8)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			if l.Name == "node" {
				return l.Rate
			}
		}
		t.Fatalf("%s: no node link in %v", p.Name, links)
		return 0
	}
	dnat, ipip, gue, hint := node(DNAT), node(XLBIPIP), node(XLBGUE), node(XLBGUEHint)
	if !(dnat < hint && hint < gue && gue < ipip) {
		t.Errorf("node ceilings dnat %.0f, gue+hint %.0f, gue %.0f, ipip %.0f: want DNAT lowest, then more tunnel bytes lower", dnat, hint, gue, ipip)
	}
	if _, links, _ := MaxRate(1e9, w, Direct, 1); len(links) != 2 {
		t.Errorf("direct: links %v, want the client and the backends only", links)
	}
}

func TestMaxRateErrors(t *testing.T) {
	for _, c := range []struct {
		bw       float64
		w        Workload
		backends int
	}{{0, Dissertation(0), 1}, {1e9, Workload{}, 1}, {1e9, Dissertation(0), 0}, {1e9, Dissertation(-1), 1}} {
		if _, _, err := MaxRate(c.bw, c.w, DNAT, c.backends); err == nil {
			t.Errorf("MaxRate(%g, %+v, %d) accepted", c.bw, c.w, c.backends)
		}
	}
}
