package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"testing"

	"github.com/xlbproject/xlb/testbed/lab"
)

// The lab's FRR (lab.RouterFRR), read through vtysh.

// frrVtysh runs vtysh with args against the FRR of lab prefix and
// returns its output.
func frrVtysh(t *testing.T, ctx context.Context, prefix string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "vtysh", append([]string{"--vty_socket", lab.FRRDir(prefix)}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("vtysh %q: %v\n%s", args, err, out)
	}
	return out
}

// frrPath is one path of `show bgp ipv4 unicast PREFIX json`.
type frrPath struct {
	// Stale: kept by graceful restart after its session ended.
	Stale     bool    `json:"stale"`
	LocPrf    *uint32 `json:"locPrf"`
	Community *struct {
		String string `json:"string"`
	} `json:"community"`
	LargeCommunity *struct {
		String string `json:"string"`
	} `json:"largeCommunity"`
}

func (p frrPath) String() string {
	var c, l, lp string
	if p.Community != nil {
		c = p.Community.String
	}
	if p.LargeCommunity != nil {
		l = p.LargeCommunity.String
	}
	if p.LocPrf != nil {
		lp = fmt.Sprint(*p.LocPrf)
	}
	return fmt.Sprintf("{communities %q large %q locPrf %s}", c, l, lp)
}

// frrPaths is FRR's paths to pfx.
func frrPaths(t *testing.T, ctx context.Context, prefix string, pfx netip.Prefix) []frrPath {
	t.Helper()
	cmd := fmt.Sprintf("show bgp ipv4 unicast %s json", pfx)
	out := frrVtysh(t, ctx, prefix, "-c", cmd)
	var r struct {
		Paths []frrPath `json:"paths"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return r.Paths
}

// frrRoute says whether the lab's FRR has a path to vip, and whether it
// is stale (kept by graceful restart, its session gone).
func frrRoute(t *testing.T, ctx context.Context, prefix string, vip netip.Addr) (present, stale bool) {
	t.Helper()
	ps := frrPaths(t, ctx, prefix, netip.PrefixFrom(vip, 32))
	if len(ps) == 0 {
		return false, false
	}
	return true, ps[0].Stale
}
