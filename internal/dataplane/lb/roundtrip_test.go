package lb

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// newDecap loads the backend-host program (package decap), unpinned, with
// the fixture's backend as its host address and the fixture's VIP.
func newDecap(t testing.TB) *ebpf.Collection {
	t.Helper()
	spec, err := decap.Spec()
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coll.Close)
	if err := decap.Configure(coll, []netip.Addr{fxBackend}, []netip.Addr{fxVIP}, decap.Chain{}); err != nil {
		t.Fatal(err)
	}
	return coll
}

// TestRoundTrip sends what the LB program emits through the backend
// program: the stack must receive the client's packet (TTL one lower).
func TestRoundTrip(t *testing.T) {
	d, f := newFixtureLB(t)
	objs := newDecap(t)
	for _, p := range []pkt{
		tcpTo(fxVIP, 80),
		{Src: fxClient, Dst: fxVIP, Sport: 5353, Dport: 53, Proto: 17, Payload: []byte("q")},
	} {
		in := p.Frame(f.MAC)
		v, enc := f.Run(t, d.objs.XlbLbProg, in)
		if v != xdpTX {
			t.Fatalf("LB verdict %s", verdictNames[v])
		}
		v, dec := f.Run(t, objs.Programs["xlb_decap"], enc)
		if v != xdpPass {
			t.Fatalf("decap verdict %s", verdictNames[v])
		}
		checkInner(t, dec[14:], in)
	}
}

// TestShortFrames: a frame shorter than an Ethernet header is a case both
// programs handle (the LB drops it as drop_malformed_eth, the backend
// program passes it as pass_not_ours), but BPF_PROG_TEST_RUN refuses XDP
// input under 14 bytes with EINVAL, so no fixture can reach that code on
// this kernel. The test records the refusal, and checks the verdicts on a
// kernel that accepts such frames.
func TestShortFrames(t *testing.T) {
	d, f := newFixtureLB(t)
	objs := newDecap(t)
	frame := append(append([]byte{}, f.MAC...), srcMAC[:6]...)
	frame = append(frame, 0x08) // 13 bytes: the ethertype cut in half
	for _, c := range []struct {
		name    string
		prog    *ebpf.Program
		verdict uint32
		counter func() uint64
	}{
		{"LB", d.objs.XlbLbProg, xdpDrop, func() uint64 {
			r, err := d.ReasonCounters()
			if err != nil {
				t.Fatal(err)
			}
			return r["drop_malformed_eth"]
		}},
		{"backend", objs.Programs["xlb_decap"], xdpPass, func() uint64 {
			c, err := bpfobj.SumPerCPU(objs.Maps["decap_stats"], uint32(slices.Index(wire.DecapStatNames, "pass_not_ours")))
			if err != nil {
				t.Fatal(err)
			}
			return c.Packets
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.counter()
			var v uint32
			err := f.Runner.Do(func() error {
				var err error
				v, err = c.prog.Run(&ebpf.RunOptions{Data: frame})
				return err
			})
			if errors.Is(err, unix.EINVAL) {
				t.Skipf("BPF_PROG_TEST_RUN refuses a %d-byte frame (EINVAL): the verdict for frames shorter than an Ethernet header cannot be tested on this kernel", len(frame))
			}
			if err != nil {
				t.Fatal(err)
			}
			if v != c.verdict || c.counter() != before+1 {
				t.Errorf("verdict %s, counter +%d; want %s, +1", verdictNames[v], c.counter()-before, verdictNames[c.verdict])
			}
		})
	}
}
