package main

import (
	"fmt"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/bench/internal/lbharness"
)

// abReport is an A/B run (-against): the built-in LB path and floor 2
// beside the same programs of another build of bpf/bench_floors.c.
type abReport struct {
	runInfo
	Object   string                  `json:"object"`
	Backends int                     `json:"backends"`
	Repeat   uint32                  `json:"repeat"`
	Rounds   int                     `json:"rounds"`
	Results  []lbharness.BenchResult `json:"results"`
	// Paired ratios (the median over rounds of one program's round over
	// the other's in the same round).
	OtherLBOverLB       float64 `json:"paired_other_lb_over_lb"`
	OtherFloorOverFloor float64 `json:"paired_other_floor_over_floor"`
	LBOverFloor         float64 `json:"paired_lb_over_floor"`
	OtherLBOverFloor    float64 `json:"paired_other_lb_over_other_floor"`
}

// runAB is lbbench -against OBJECT: measure, print, write the JSON.
func runAB(object, out string, backends int, repeat uint32, rounds int) {
	res, err := lbharness.RunAB(lbharness.BenchConfig{Backends: backends, Repeat: repeat, Rounds: rounds}, object)
	if err != nil {
		fail(err)
	}
	by := map[string][]float64{}
	for _, x := range res {
		by[x.Name] = x.RoundsNs
	}
	r := abReport{
		runInfo: thisRun(), Object: object, Backends: backends, Repeat: repeat, Rounds: rounds, Results: res,
		OtherLBOverLB:       lbharness.PairedRatio(by[lbharness.ABOtherLB], by[lbharness.ABLB]),
		OtherFloorOverFloor: lbharness.PairedRatio(by[lbharness.ABOtherFloor], by[lbharness.ABFloor]),
		LBOverFloor:         lbharness.PairedRatio(by[lbharness.ABLB], by[lbharness.ABFloor]),
		OtherLBOverFloor:    lbharness.PairedRatio(by[lbharness.ABOtherLB], by[lbharness.ABOtherFloor]),
	}
	fmt.Printf("kernel %s, %s, %d backends, %d rounds x %d runs, against %s\n", r.Kernel, r.CPU, backends, rounds, repeat, object)
	fmt.Printf("%-24s %8s %10s\n", "program", "min ns", "median ns")
	for _, x := range res {
		fmt.Printf("%-24s %8.1f %10.1f\n", x.Name, x.MinNs, x.MedianNs)
	}
	fmt.Printf("paired rounds: other LB / LB %.3f, other floor / floor %.3f; LB / floor %.2fx, other LB / other floor %.2fx\n",
		r.OtherLBOverLB, r.OtherFloorOverFloor, r.LBOverFloor, r.OtherLBOverFloor)
	name, err := benchutil.WriteJSON(out, "ab", time.Now().UTC().Format(benchutil.StampLayout), r)
	if err != nil {
		fail(err)
	}
	fmt.Println("wrote", name)
}
