package lb

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// TestNextHopCache: the program reuses a cached next hop while its
// generation holds, picks up a change at once when the generation is
// bumped, and on its own once the entry is too old.
func TestNextHopCache(t *testing.T) {
	d, f := newFixtureLB(t)
	in := tcpTo(fxVIP, 80).Frame(f.MAC)
	dstMAC := func() net.HardwareAddr {
		t.Helper()
		v, out := f.Run(t, d.objs.XlbLbProg, in)
		if v != xdpTX {
			t.Fatalf("verdict %s", verdictNames[v])
		}
		return net.HardwareAddr(out[0:6])
	}
	setRouterMAC := func(mac string) {
		ipcmd(t, "-n", f.Name, "neigh", "replace", "10.0.1.1", "lladdr", mac, "dev", "veth0", "nud", "permanent")
	}
	if got := dstMAC(); !bytes.Equal(got, fxRouterMAC) {
		t.Fatalf("first packet to %v, want %v", got, fxRouterMAC)
	}

	// The entry must still be young when the next packet comes: the
	// maximum age is 100 jiffies, 0.1 s at HZ=1000, which a loaded
	// machine's fork and exec of ip can take. A round that took more
	// than half of that proves nothing either way and is done again.
	for try := 1; ; try++ {
		if err := d.backends.invalidateNextHops(); err != nil {
			t.Fatal(err)
		}
		filled := time.Now()
		if got := dstMAC(); !bytes.Equal(got, fxRouterMAC) {
			t.Fatalf("after a generation bump: %v, want %v", got, fxRouterMAC)
		}
		setRouterMAC("02:00:00:00:00:0b")
		got := dstMAC()
		if time.Since(filled) < 50*time.Millisecond {
			if !bytes.Equal(got, fxRouterMAC) {
				t.Fatalf("right after the change %v: want the cached %v (the generation did not move)", got, fxRouterMAC)
			}
			break
		}
		if try == 10 {
			t.Fatalf("no round of refill, change and packet within 50 ms in %d tries", try)
		}
		setRouterMAC(fxRouterMAC.String())
	}
	if err := d.backends.invalidateNextHops(); err != nil {
		t.Fatal(err)
	}
	if got := dstMAC().String(); got != "02:00:00:00:00:0b" {
		t.Fatalf("after a generation bump: %v, want the new MAC", got)
	}

	// No bump this time: the entry ages out within 100 jiffies (1 s at
	// HZ=100, the slowest tick Linux has).
	setRouterMAC("02:00:00:00:00:0c")
	deadline := time.Now().Add(3 * time.Second)
	for dstMAC().String() != "02:00:00:00:00:0c" {
		if time.Now().After(deadline) {
			t.Fatal("a cached next hop outlived its maximum age")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
