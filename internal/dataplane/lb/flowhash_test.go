package lb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// TestFlowHashChoiceIsPruned: the verifier removes the flow hash a
// program was not loaded with, so the choice costs a packet nothing.
// Were both kept behind the branch, the two loads would be the same
// length; loaded with fmix64, the program is shorter by about the size of
// the lookup3 mix in each of its two copies.
func TestFlowHashChoiceIsPruned(t *testing.T) {
	requirePrivileges(t)
	lengths := map[wire.FlowHash]int{}
	for _, kind := range []wire.FlowHash{wire.FlowHashFmix64, wire.FlowHashLookup3} {
		d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize, FlowHash: kind})
		if err != nil {
			t.Fatal(err)
		}
		info, err := d.objs.XlbLbProg.Info()
		if err != nil {
			d.Close()
			t.Fatal(err)
		}
		insns, err := info.Instructions()
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		lengths[kind] = len(insns)
	}
	t.Logf("xlated instructions: %v", lengths)
	if d := lengths[wire.FlowHashLookup3] - lengths[wire.FlowHashFmix64]; d < 40 {
		t.Errorf("loaded with lookup3 the program has %d instructions more than with fmix64, want at least 40: the verifier kept the unchosen hash", d)
	}
}

// TestFlowHashGolden pins both hashes to values computed when each was
// introduced (lookup3's by the xlb of before dataplane.flowHash). A flow
// hash is a contract between xlb versions, not an implementation detail:
// a node whose hash changes sends its established connections to other
// backends, so a change here must be a new kind, never an edit.
func TestFlowHashGolden(t *testing.T) {
	src, vip := netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.99.0.1")
	for _, c := range []struct {
		kind         wire.FlowHash
		sport, dport uint16
		proto        uint8
		want         uint32
	}{
		{wire.FlowHashFmix64, 40000, 80, 6, 0x2f4d98f5},
		{wire.FlowHashFmix64, 5353, 53, 17, 0x9ea498fb},
		{wire.FlowHashLookup3, 40000, 80, 6, 0xf3ebe818},
		{wire.FlowHashLookup3, 5353, 53, 17, 0xf33802e8},
	} {
		if got := FlowHashOf(c.kind, src, vip, c.sport, c.dport, c.proto); got != c.want {
			t.Errorf("%v of %v:%d → %v:%d/%d = %#08x, want %#08x", c.kind, src, c.sport, vip, c.dport, c.proto, got, c.want)
		}
	}
}

// TestFlowHashAvalanche: flipping any bit of the client's address or port
// flips each bit of fmix64's hash with probability 1/2, within sampling
// error, so flows of one client subnet or port range spread like random
// ones. (lookup3's final mix misses it by up to 4 points, which is why it
// is not checked here.)
func TestFlowHashAvalanche(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vip := netip.MustParseAddr("10.99.0.1")
	const n = 20000
	// Standard deviation of a share of n fair coin flips: 0.0035. The
	// worst of 48 × 32 cells lies about 3.5 of them out.
	const limit = 0.02
	worst, at := 0.0, ""
	for bit := 0; bit < 48; bit++ {
		var flips [32]int
		for range n {
			a := r.Uint32()
			sport := uint16(r.Uint32())
			b, bport := a, sport
			if bit < 32 {
				b ^= 1 << bit
			} else {
				bport ^= 1 << (bit - 32)
			}
			x := FlowHash(addr4(a), vip, sport, 443, 6) ^ FlowHash(addr4(b), vip, bport, 443, 6)
			for o := range flips {
				flips[o] += int(x >> o & 1)
			}
		}
		for o, f := range flips {
			if dev := math.Abs(float64(f)/n - 0.5); dev > worst {
				worst, at = dev, fmt.Sprintf("input bit %d, output bit %d", bit, o)
			}
		}
	}
	t.Logf("largest bias %.4f (%s)", worst, at)
	if worst > limit {
		t.Errorf("flipping %s flips it with probability off 1/2 by %.3f, more than %.3f", at, worst, limit)
	}
}

// TestFlowHashSpread: the flows of 256 neighbouring clients with 256
// consecutive source ports each land on the 16 backends of a table evenly
// (a chi-squared test at 0.1 %: 37.7 for 15 degrees of freedom).
func TestFlowHashSpread(t *testing.T) {
	vip := netip.MustParseAddr("10.99.0.1")
	for _, kind := range []wire.FlowHash{wire.FlowHashFmix64, wire.FlowHashLookup3} {
		var count [16]int
		for c := range 256 {
			src := netip.AddrFrom4([4]byte{10, 0, 7, byte(c)})
			for p := range 256 {
				slot := Slot(FlowHashOf(kind, src, vip, uint16(32768+p), 80, 6), 65537)
				count[slot%16]++
			}
		}
		const want = 65536.0 / 16
		chi := 0.0
		for _, c := range count {
			chi += (float64(c) - want) * (float64(c) - want) / want
		}
		t.Logf("%v: chi-squared %.1f", kind, chi)
		if chi > 37.7 {
			t.Errorf("%v: flows of one /24 spread unevenly over 16 backends: chi-squared %.1f > 37.7 (%v)", kind, chi, count)
		}
	}
}

func addr4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
