package xdppass

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/testbed/testenv"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

func TestAttachIdempotent(t *testing.T) {
	testenv.RequireRoot(t, "XDP programs in a network namespace")
	ns := fmt.Sprintf("xlbtest-pass-%d", os.Getpid())
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1"},
		{"-n", ns, "link", "set", "veth1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		}
	}
	dir := filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-pass-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	pin := filepath.Join(dir, "pass-veth1")
	var ids []uint32
	for i := 0; i < 2; i++ {
		if err := Attach(ns, "veth1", pin); err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
		id, err := xdptest.AttachedProgram(ns, "veth1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if ids[0] == 0 {
		t.Fatal("no XDP program on veth1")
	}
	if ids[1] != ids[0] {
		t.Errorf("attaching again replaced program %d with %d", ids[0], ids[1])
	}
}
