package k8stest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// deadlineMargin is left of a test binary's -timeout when a start (with a
// first build) is cut short, so that the test fails with the reason
// instead of the binary panicking.
const deadlineMargin = 30 * time.Second

// StartT starts a control plane for t and stops it when t and its
// subtests end; if t failed, it first logs the tail of every process's
// log. It fails t when the control plane cannot start (a failed build
// included) and skips t when etcd is not installed, except on CI
// (CI=true), where a skip would hide that the tests never ran.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if _, err := findEtcd(opts.Etcd); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: not skipping)", err)
		}
		t.Skip(err)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	ctx := t.Context()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-deadlineMargin))
			defer cancel()
		}
	}
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubernetes control plane logs (%s):\n%s", c.Dir, c.logTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop kubernetes control plane: %v", err)
		}
	})
	return c
}
