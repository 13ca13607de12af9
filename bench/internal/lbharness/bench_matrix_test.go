package lbharness

import (
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// The hit-path matrix runs every kind of case (a short run: the numbers
// are not looked at), so that `make bench` cannot find it broken: hits
// over TCP and UDP, many backends and services, and the miss path.
func TestRunMatrix(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
	cases := []MatrixCase{
		{Proto: "tcp", Backends: 16, Services: 1},
		{Proto: "udp", Backends: 1024, Services: 10000},
		{Proto: "tcp", Services: 100, Miss: true},
		{Proto: "tcp", Services: 10000, Miss: true, FilterHit: true},
	}
	res, err := RunMatrix(MatrixConfig{Cases: cases, Repeat: 1000, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.MatrixCase != cases[i] || len(r.LB.RoundsNs) != 3 || r.LB.MinNs <= 0 || r.Floor.MinNs <= 0 || r.Mpps <= 0 {
			t.Errorf("case %v: %+v", cases[i], r)
		}
		want := "XDP_TX"
		if r.Miss {
			want = "XDP_PASS"
		}
		if r.LB.Verdict != want {
			t.Errorf("case %v: LB verdict %s, want %s", cases[i], r.LB.Verdict, want)
		}
	}
	if _, err := RunMatrix(MatrixConfig{Cases: []MatrixCase{{Proto: "tcp", Backends: 1, Services: lb.MaxServices + 1}}, Repeat: 1, Rounds: 1}); err == nil {
		t.Error("more services than a node holds: no error")
	}
}
