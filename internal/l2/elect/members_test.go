package elect

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

var (
	nodeA = Node{"a", netip.MustParseAddr("10.0.1.2")}
	nodeB = Node{"b", netip.MustParseAddr("10.0.1.3")}
	nodeC = Node{"c", netip.MustParseAddr("10.0.1.4")}
	three = []Node{nodeA, nodeB, nodeC}
)

const port = 7947

func from(n Node) netip.AddrPort { return netip.AddrPortFrom(n.Address, port) }

func beat(name string) []byte { return Heartbeat{Name: name, Seq: 1}.Marshal() }

func TestAliveAndDead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	m := NewMembers("a", three, port, 400*ms, t0)
	if got := m.Alive(t0); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("at start: alive %v; every node counts as heard", got)
	}
	// b keeps beating, c falls silent.
	for at := 100 * ms; at <= 500*ms; at += 100 * ms {
		if _, drop := m.Receive(from(nodeB), beat("b"), t0.Add(at)); drop != "" {
			t.Fatalf("b's heartbeat refused: %s", drop)
		}
	}
	if got := m.Alive(t0.Add(399 * ms)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("before the dead time: alive %v", got)
	}
	if got := m.Alive(t0.Add(400 * ms)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("at the dead time: alive %v, want a b", got)
	}
	// c comes back.
	m.Receive(from(nodeB), beat("b"), t0.Add(time.Second))
	m.Receive(from(nodeC), beat("c"), t0.Add(time.Second))
	if got := m.Alive(t0.Add(time.Second)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("c heard again: alive %v", got)
	}
	// b leaves: gone at once, and back with its next plain heartbeat.
	m.Receive(from(nodeB), Heartbeat{Name: "b", Leaving: true}.Marshal(), t0.Add(time.Second))
	if got := m.Alive(t0.Add(time.Second)); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("b leaving: alive %v, want a c", got)
	}
	m.Receive(from(nodeB), beat("b"), t0.Add(2*time.Second))
	if got := m.Alive(t0.Add(2 * time.Second)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("b back, c silent for 1s: alive %v, want a b", got)
	}
}

func TestReceiveRefuses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewMembers("a", three, port, time.Second, t0)
	cases := []struct {
		name string
		from netip.AddrPort
		b    []byte
		want string
	}{
		{"garbage", from(nodeB), []byte("hello"), DropMalformed},
		{"unlisted name", from(nodeB), beat("z"), DropUnknown},
		{"this node's own name", from(nodeB), beat("a"), DropUnknown},
		{"a listed name from another address", from(nodeC), beat("b"), DropSpoofed},
		{"a listed name from another port", netip.AddrPortFrom(nodeB.Address, 9999), beat("b"), DropSpoofed},
	}
	want := map[string]uint64{}
	for _, c := range cases {
		if _, drop := m.Receive(c.from, c.b, t0.Add(5*time.Second)); drop != c.want {
			t.Errorf("%s: drop %q, want %q", c.name, drop, c.want)
		}
		want[c.want]++
	}
	if got := m.Dropped(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dropped %v, want %v", got, want)
	}
	// None of them kept b or c alive.
	if got := m.Alive(t0.Add(5 * time.Second)); !slices.Equal(got, []string{"a"}) {
		t.Errorf("alive %v after refused heartbeats only, want a", got)
	}
	// An IPv4-mapped source is the IPv4 address.
	if _, drop := m.Receive(netip.AddrPortFrom(netip.AddrFrom16(nodeB.Address.As16()), port), beat("b"), t0); drop != "" {
		t.Errorf("IPv4-mapped source refused: %s", drop)
	}
}

func vips(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})
	}
	return out
}

// Ownership is spread VIP by VIP, and a node's death moves only its own
// VIPs, each to a node that is still alive.
func TestOwnerSpreadAndMinimalMoves(t *testing.T) {
	all := vips(3000)
	owner := map[netip.Addr]string{}
	count := map[string]int{}
	for _, v := range all {
		o := Owner(v, []string{"a", "b", "c"})
		// The order of the alive list does not matter.
		if p := Owner(v, []string{"c", "a", "b"}); p != o {
			t.Fatalf("%s: owner %s or %s depending on order", v, o, p)
		}
		owner[v] = o
		count[o]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if count[n] < 800 || count[n] > 1200 {
			t.Errorf("node %s owns %d of 3000 VIPs, want about 1000: %v", n, count[n], count)
		}
	}
	moved := 0
	for _, v := range all {
		o := Owner(v, []string{"a", "c"})
		switch {
		case owner[v] == "b":
			moved++
			if o == "b" {
				t.Fatalf("%s still owned by dead b", v)
			}
		case o != owner[v]:
			t.Errorf("%s moved from %s to %s though %s is alive", v, owner[v], o, owner[v])
		}
	}
	if moved != count["b"] {
		t.Errorf("%d VIPs moved, b owned %d", moved, count["b"])
	}
	if Owner(all[0], nil) != "" {
		t.Error("an owner among no nodes")
	}
	if got := Owned("a", all, []string{"a"}); len(got) != len(all) {
		t.Errorf("a alone owns %d of %d", len(got), len(all))
	}
}

// The score is part of the protocol between nodes of different builds:
// fixed values catch an accidental change.
func TestOwnerIsStable(t *testing.T) {
	got := []string{}
	for _, v := range vips(8) {
		got = append(got, Owner(v, []string{"a", "b", "c"}))
	}
	want := []string{"b", "c", "c", "a", "a", "a", "b", "c"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("owners of 10.99.0.0-7 among a b c: %q, want %q", got, want)
	}
}

// A node that was itself stopped counts the others as heard when it
// resumes: it must not take their VIPs on a stale view.
func TestRestart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewMembers("a", three, port, 400*time.Millisecond, t0)
	m.Receive(from(nodeB), Heartbeat{Name: "b", Leaving: true}.Marshal(), t0)
	later := t0.Add(10 * time.Second)
	if got := m.Alive(later); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after 10s of silence: alive %v", got)
	}
	m.Restart(later)
	if got := m.Alive(later); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("after Restart: alive %v, want every node", got)
	}
	if got := m.Alive(later.Add(400 * time.Millisecond)); !slices.Equal(got, []string{"a"}) {
		t.Errorf("a dead time after Restart with nothing heard: alive %v, want a alone", got)
	}
}
