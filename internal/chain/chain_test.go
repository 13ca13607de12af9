package chain

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
)

const m = 1009

func set(keys ...string) []maglev.Backend {
	out := make([]maglev.Backend, len(keys))
	for i, k := range keys {
		out[i] = maglev.Backend{Key: k, Weight: 1}
	}
	return out
}

// owners is the table of bs as keys per slot.
func owners(t *testing.T, bs []maglev.Backend) []string {
	t.Helper()
	idx, err := maglev.Build(bs, m)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, m)
	for i, j := range idx {
		out[i] = bs[j].Key
	}
	return out
}

func hints(t *testing.T, current []maglev.Backend, past ...Past) ([]Hint, time.Time) {
	t.Helper()
	h, gen, err := Hints(current, past, m)
	if err != nil {
		t.Fatal(err)
	}
	return h, gen
}

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// Removing backends one by one: each slot names the owner it had before
// its own latest change, with that change's time, so connections moved
// by the first removal keep their chain after the second.
func TestRemoveOneByOne(t *testing.T) {
	all := set("a", "b", "c", "d")
	noA := set("b", "c", "d")
	noAB := set("c", "d")
	t1, t2 := t0, t0.Add(10*time.Second)
	h, gen := hints(t, noAB, Past{Until: t2, Backends: noA}, Past{Until: t1, Backends: all})
	if !gen.Equal(t2) {
		t.Errorf("generation %v, want the newest change %v", gen, t2)
	}
	before, middle, now := owners(t, all), owners(t, noA), owners(t, noAB)
	var fromA, fromB, twice int
	for s := range h {
		switch {
		case middle[s] != now[s]:
			if h[s].Prev[0] != middle[s] || !h[s].Changed.Equal(t2) {
				t.Fatalf("slot %d moved %s→%s at t2, hint %+v", s, middle[s], now[s], h[s])
			}
			// Moved twice: a connection from before the first move
			// still finds its backend.
			want2 := ""
			if before[s] != middle[s] && before[s] != now[s] {
				want2 = before[s]
				twice++
			}
			if h[s].Prev[1] != want2 {
				t.Fatalf("slot %d moved %s→%s→%s, hint %+v", s, before[s], middle[s], now[s], h[s])
			}
			fromB++
		case before[s] != now[s]:
			if h[s].Prev[0] != before[s] || !h[s].Changed.Equal(t1) {
				t.Fatalf("slot %d moved %s→%s at t1, hint %+v", s, before[s], now[s], h[s])
			}
			fromA++
		default:
			if h[s] != (Hint{}) {
				t.Fatalf("slot %d never moved, hint %+v", s, h[s])
			}
		}
	}
	if twice == 0 {
		t.Error("no slot moved twice: the test shows nothing about Prev2")
	}
	if fromA < int(m)/8 || fromB < int(m)/4 {
		t.Errorf("%d slots moved at t1 and %d at t2; want about a sixth (a quarter, less what moved again) and a third of %d", fromA, fromB, m)
	}
}

// Adding a backend: the slots it takes name their former owner.
func TestAdd(t *testing.T) {
	h, _ := hints(t, set("a", "b", "c"), Past{Until: t0, Backends: set("a", "b")})
	taken := 0
	for s, o := range owners(t, set("a", "b", "c")) {
		if o == "c" {
			taken++
			if h[s].Prev[0] != "a" && h[s].Prev[0] != "b" {
				t.Fatalf("slot %d taken by c names %q", s, h[s].Prev)
			}
		}
	}
	if taken == 0 {
		t.Fatal("c took no slot")
	}
}

// The hints depend on the history, not on the order it is given in; the
// caller's slice is left alone.
func TestOrderIndependent(t *testing.T) {
	past := []Past{
		{Until: t0, Backends: set("a", "b", "c", "d", "e")},
		{Until: t0.Add(time.Second), Backends: set("a", "b", "c", "d")},
		{Until: t0.Add(2 * time.Second), Backends: set("a", "b", "c", "d", "e", "f")},
	}
	want, wantGen := hints(t, set("b", "c", "f"), past...)
	reversed := slices.Clone(past)
	slices.Reverse(reversed)
	got, gotGen := hints(t, set("b", "c", "f"), reversed...)
	if !slices.Equal(got, want) || !gotGen.Equal(wantGen) {
		t.Error("the hints depend on the order of the history")
	}
	if !past[0].Until.Equal(t0) {
		t.Error("Hints reordered the caller's history")
	}
}

// Sets without an active backend owned no slot and name no one.
func TestEmptySets(t *testing.T) {
	drained := []maglev.Backend{{Key: "a", Weight: 0}}
	h, gen := hints(t, set("a", "b"), Past{Until: t0, Backends: drained}, Past{Until: t0.Add(-time.Second)})
	for s := range h {
		if h[s] != (Hint{}) {
			t.Fatalf("slot %d: %+v, want no hint", s, h[s])
		}
	}
	if !gen.Equal(t0) {
		t.Errorf("generation %v, want %v", gen, t0)
	}
	if h, gen := hints(t, set("a")); len(h) != m || !gen.IsZero() {
		t.Errorf("without history: %d hints, generation %v", len(h), gen)
	}
}

func TestErrors(t *testing.T) {
	dup := []maglev.Backend{{Key: "a", Weight: 1}, {Key: "a", Weight: 1}}
	if _, _, err := Hints(set("a"), []Past{{Until: t0, Backends: dup}}, m); err == nil {
		t.Error("a history set with a duplicate key was accepted")
	}
	if _, _, err := Hints(dup, []Past{{Until: t0, Backends: set("a")}}, m); err == nil {
		t.Error("a current set with a duplicate key was accepted")
	}
	if _, _, err := Hints(set("a"), []Past{{Until: t0, Backends: set("b")}}, 1000); err == nil {
		t.Error("a table size that is no prime was accepted")
	}
}

// Backends that leave one after the other and come back: whichever set
// a connection started under, its backend is the slot's owner or named in
// the hint, though there are more earlier sets than the hint has room
// for owners.
func TestEveryEarlierOwnerNamed(t *testing.T) {
	// The survival experiment's third change: a left, b left, a is back.
	sets := [][]maglev.Backend{
		set("a", "b", "c", "d"),
		set("b", "c", "d"),
		set("c", "d"),
	}
	current := set("a", "c", "d")
	var past []Past
	for i, s := range sets {
		past = append(past, Past{Until: t0.Add(time.Duration(i) * time.Second), Backends: s})
	}
	h, _ := hints(t, current, past...)
	now := owners(t, current)
	deep := 0
	for _, p := range past {
		for s, o := range owners(t, p.Backends) {
			if o != now[s] && !slices.Contains(h[s].Prev[:], o) {
				t.Fatalf("slot %d: owner %s under the set that ended %v is not in %v", s, o, p.Until, h[s].Prev)
			}
		}
	}
	for s := range h {
		if h[s].Prev[Depth-1] != "" {
			deep++
		}
	}
	if deep == 0 {
		t.Errorf("no slot has %d earlier owners: the test shows nothing about the depth", Depth)
	}
}

// Two sets that ended in the same second (an agent's own record of two
// quick changes) count in the order given: the later one is the newer.
func TestSameSecond(t *testing.T) {
	first, second := set("a", "b", "c"), set("a", "b")
	h, _ := hints(t, set("a"), Past{Until: t0, Backends: first}, Past{Until: t0, Backends: second})
	want, _ := hints(t, set("a"), Past{Until: t0.Add(-time.Second), Backends: first}, Past{Until: t0, Backends: second})
	for i := range h {
		if h[i].Prev != want[i].Prev {
			t.Fatalf("slot %d: %v, want %v: sets that ended in the same second are not taken in the order given", i, h[i].Prev, want[i].Prev)
		}
	}
}

// referenceHints is the definition of the hints written out plainly, as
// keys per slot: Hints must give the same.
func referenceHints(t *testing.T, current []maglev.Backend, past []Past) []Hint {
	t.Helper()
	now := make([]string, m)
	if active(current) {
		now = owners(t, current)
	}
	out := make([]Hint, m)
	byAge := slices.Clone(past)
	slices.Reverse(byAge)
	slices.SortStableFunc(byAge, func(a, b Past) int { return b.Until.Compare(a.Until) })
	for _, p := range byAge {
		if !active(p.Backends) {
			continue
		}
		for s, o := range owners(t, p.Backends) {
			h := &out[s]
			if o == now[s] || slices.Contains(h.Prev[:], o) {
				continue
			}
			if i := slices.Index(h.Prev[:], ""); i >= 0 {
				h.Prev[i] = o
				if i == 0 {
					h.Changed = p.Until
				}
			}
		}
	}
	return out
}

// Random histories, with weights, drained sets, sets that ended in the
// same second and backends that come back: Hints gives the reference's
// hints, with no tables kept and with a few kept across calls (so some
// come from the cache and some were evicted).
func TestHintsAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80", "10.0.0.7:80"}
	randomSet := func() []maglev.Backend {
		var bs []maglev.Backend
		for _, k := range pool {
			if rng.IntN(3) > 0 {
				bs = append(bs, maglev.Backend{Key: k, Weight: uint32(rng.IntN(3))})
			}
		}
		rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		return bs
	}
	kept := NewTables(3)
	for round := range 60 {
		current := randomSet()
		var past []Past
		for range rng.IntN(6) {
			past = append(past, Past{Until: t0.Add(time.Duration(rng.IntN(4)) * time.Second), Backends: randomSet()})
		}
		want := referenceHints(t, current, past)
		for _, c := range []*Tables{nil, kept} {
			got, err := c.Slots(current, past, m)
			if err != nil {
				t.Fatal(err)
			}
			for s := range want {
				if h := got.Hint(s); h != want[s] {
					t.Fatalf("round %d (tables kept: %v), slot %d: %+v, want %+v", round, c != nil, s, h, want[s])
				}
			}
			gen := got.Generation
			if len(past) > 0 {
				if newest := slices.MaxFunc(past, func(a, b Past) int { return a.Until.Compare(b.Until) }).Until; !gen.Equal(newest) {
					t.Fatalf("round %d: generation %v, want %v", round, gen, newest)
				}
			}
		}
	}
	if n := kept.lru.Len(); n != 3 {
		t.Errorf("%d tables kept, want the limit of 3", n)
	}
}

// Build gives maglev.Build's table for any order of the set, whether it
// built it or kept it.
func TestTablesBuild(t *testing.T) {
	c := NewTables(2)
	bs := []maglev.Backend{{Key: "c", Weight: 1}, {Key: "a", Weight: 2}, {Key: "b", Weight: 0}, {Key: "d", Weight: 1}}
	for i := range 4 {
		in := slices.Clone(bs)
		slices.Reverse(in[:i])
		want, err := maglev.Build(in, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Build(in, m)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("order %d: the table differs from maglev.Build's", i)
		}
	}
	// A backend without weight owns no slot: the set without it has the
	// same table, kept once.
	without := slices.DeleteFunc(slices.Clone(bs), func(b maglev.Backend) bool { return b.Weight == 0 })
	got, err := c.Build(without, m)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := maglev.Build(without, m); !slices.Equal(got, want) {
		t.Fatal("the set without its drained backend: the table differs from maglev.Build's")
	}
	if n := c.lru.Len(); n != 1 {
		t.Errorf("%d tables kept for one set, want 1", n)
	}
	// A drained backend's key still counts as taken.
	if _, err := c.Build(append(slices.Clone(bs), maglev.Backend{Key: "b", Weight: 1}), m); err == nil {
		t.Error("a key given twice, once drained, was accepted")
	}
	// Errors are maglev.Build's own.
	drained := []maglev.Backend{{Key: "a"}, {Key: "b"}}
	_, want := maglev.Build(drained, m)
	if _, err := c.Build(drained, m); err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("a set without weight: %v, want %v", err, want)
	}
	// Another weight is another set.
	bs[0].Weight = 3
	if _, err := c.Build(bs, m); err != nil {
		t.Fatal(err)
	}
	if n := c.lru.Len(); n != 2 {
		t.Errorf("%d tables kept for two sets, want 2", n)
	}
}
