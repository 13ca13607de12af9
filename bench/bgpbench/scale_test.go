package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestPlanScale checks the plan's invariants over many seeds: every
// event flips its node, 1 to all nodes keep running, the boundaries force
// the operation, both operations occur, pauses stay in range, and a seed
// gives the same plan again.
func TestPlanScale(t *testing.T) {
	for seed := range uint64(50) {
		start := []bool{true, true, false, true}
		steps, err := planScale(rand.New(rand.NewPCG(seed, 1)), start, 120)
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != 120 {
			t.Fatalf("seed %d: %d steps, want 120", seed, len(steps))
		}
		up := slices.Clone(start)
		count := 3
		ops := map[string]int{}
		for k, st := range steps {
			before := count
			switch st.Op {
			case opStart:
				if up[st.Node] {
					t.Fatalf("seed %d step %d: starts node %d, which runs", seed, k, st.Node)
				}
				up[st.Node] = true
				count++
			case opStop:
				if !up[st.Node] {
					t.Fatalf("seed %d step %d: stops node %d, which is stopped", seed, k, st.Node)
				}
				up[st.Node] = false
				count--
			default:
				t.Fatalf("seed %d step %d: operation %q", seed, k, st.Op)
			}
			ops[st.Op]++
			if count < 1 || count > len(up) {
				t.Fatalf("seed %d step %d: %d running", seed, k, count)
			}
			if before == len(up) && st.Op != opStop || before == 1 && st.Op != opStart {
				t.Fatalf("seed %d step %d: %s with %d of %d running", seed, k, st.Op, before, len(up))
			}
			if st.Pause < pauseMin || st.Pause > pauseMax {
				t.Fatalf("seed %d step %d: pause %s outside [%s, %s]", seed, k, st.Pause, pauseMin, pauseMax)
			}
		}
		if ops[opStart] < 20 || ops[opStop] < 20 {
			t.Errorf("seed %d: %v: want both operations often", seed, ops)
		}
		again, _ := planScale(rand.New(rand.NewPCG(seed, 1)), start, 120)
		if !slices.Equal(steps, again) {
			t.Errorf("seed %d: the plan differs the second time", seed)
		}
		if !slices.Equal(start, []bool{true, true, false, true}) {
			t.Fatalf("planScale changed its input: %v", start)
		}
	}
}

// TestPlanScaleSpreads: every node is started and stopped, and pauses
// cover their range.
func TestPlanScaleSpreads(t *testing.T) {
	steps, err := planScale(rand.New(rand.NewPCG(7, 7)), []bool{true, true, true, true}, 400)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[scaleStep]bool{}
	var short, long bool
	for _, st := range steps {
		seen[scaleStep{Op: st.Op, Node: st.Node}] = true
		short = short || st.Pause < pauseMin+200*time.Millisecond
		long = long || st.Pause > pauseMax-200*time.Millisecond
	}
	for n := range 4 {
		for _, op := range []string{opStart, opStop} {
			if !seen[scaleStep{Op: op, Node: n}] {
				t.Errorf("no %s of node %d in 400 steps", op, n)
			}
		}
	}
	if !short || !long {
		t.Errorf("pauses do not cover [%s, %s]", pauseMin, pauseMax)
	}
}

func TestPlanScaleRefusesBadStart(t *testing.T) {
	for _, running := range [][]bool{nil, {true}, {false, false, false}} {
		if _, err := planScale(rand.New(rand.NewPCG(1, 1)), running, 5); err == nil {
			t.Errorf("planScale(%v) succeeded", running)
		}
	}
}

// TestBreakdownAndSummarize: the parts come from the log's stamps, a
// missing stamp leaves its part out, and the summaries split starts from
// stops.
func TestBreakdownAndSummarize(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	start := ScaleEvent{Op: opStart, t0: t0, t1: at(2100)}
	breakdown(&start, agentLog{speakerStarted: at(300), peerUp: at(2050), bfdUp: at(1000)})
	if start.AgentMs == nil || *start.AgentMs != 300 || *start.SessionMs != 1750 || *start.RouterMs != 50 || *start.BFDUpMs != -1050 {
		t.Errorf("start parts: agent %v session %v router %v bfd %v", deref(start.AgentMs), deref(start.SessionMs), deref(start.RouterMs), deref(start.BFDUpMs))
	}
	stop := ScaleEvent{Op: opStop, t0: t0, t1: at(64)}
	breakdown(&stop, agentLog{withdrawn: at(2)})
	if *stop.AgentMs != 2 || *stop.RouterMs != 62 || stop.SessionMs != nil {
		t.Errorf("stop parts: agent %v router %v session %v", deref(stop.AgentMs), deref(stop.RouterMs), stop.SessionMs)
	}
	bare := ScaleEvent{Op: opStart, t0: t0, t1: at(2000)}
	breakdown(&bare, agentLog{})
	if bare.AgentMs != nil || bare.SessionMs != nil || bare.RouterMs != nil {
		t.Errorf("parts without a log: %+v", bare)
	}

	start.Ms, stop.Ms, bare.Ms = 2100, 64, 2000
	r := &ScaleResult{Events: []ScaleEvent{start, stop, bare}}
	r.summarize()
	if r.Start.N != 2 || r.Start.Max != 2100 || r.Stop.N != 1 || r.Stop.P50 != 64 {
		t.Errorf("summaries: start %+v stop %+v", r.Start, r.Stop)
	}
	if got := findPart(r, opStart, partSession); got.N != 1 || got.P50 != 1750 {
		t.Errorf("start/session breakdown: %+v", got)
	}
	if got := findPart(r, opStop, partSession); got.N != 0 {
		t.Errorf("a stop has no session part: %+v", got)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestNodeOrder(t *testing.T) {
	if got := nodeOrder(0); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Errorf("round 0: %v", got)
	}
	if got := nodeOrder(1); !slices.Equal(got, []int{4, 3, 2, 1}) {
		t.Errorf("round 1: %v", got)
	}
	if got := nodeOrder(2); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Errorf("round 2: %v", got)
	}
}
