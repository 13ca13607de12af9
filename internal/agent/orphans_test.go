package agent

import (
	"net/netip"
	"slices"
	"testing"
)

// TestOrphanSet: orphans are listed by address, lowest ID first, whatever
// the order they came in; one added again under another address moves;
// removing one, or one that is none, leaves the others.
func TestOrphanSet(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.3.3")
	o := newOrphanSet()
	for _, id := range []uint32{7, 3, 9, 5} {
		o.add(id, a)
	}
	o.add(4, b)
	check := func(what string, addr netip.Addr, want ...uint32) {
		t.Helper()
		if got := o.withAddr(addr); !slices.Equal(got, want) {
			t.Errorf("%s: orphans of %s: %v, want %v", what, addr, got, want)
		}
	}
	check("added", a, 3, 5, 7, 9)
	check("added", b, 4)
	o.add(5, b) // the same ID, another address
	check("moved away", a, 3, 7, 9)
	check("moved here", b, 4, 5)
	o.remove(3)
	o.remove(42)
	check("removed", a, 7, 9)
	o.remove(4)
	o.remove(5)
	check("all removed", b)
	if _, ok := o.byAddr[b]; ok || o.len() != 2 || !slices.Equal(o.ids(), []uint32{7, 9}) {
		t.Errorf("after removals: %d orphans %v, addresses %v; want 7 and 9 of %s alone", o.len(), o.ids(), o.byAddr, a)
	}
}
