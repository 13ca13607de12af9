package dataplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// BPFFSRoot is where bpffs is (or gets) mounted.
const BPFFSRoot = "/sys/fs/bpf"

// ensureBPFFS mounts bpffs on BPFFSRoot when nothing is mounted there and
// checks that path lies on a bpffs, so pins survive this process.
func ensureBPFFS(path string) error {
	if !strings.HasPrefix(filepath.Clean(path)+"/", BPFFSRoot+"/") {
		return checkBPFFS(filepath.Dir(path))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(BPFFSRoot, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", BPFFSRoot, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", BPFFSRoot, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs on %s: %w (mount it yourself: mount -t bpf bpf %s)", BPFFSRoot, err, BPFFSRoot)
		}
	}
	return nil
}

func checkBPFFS(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		err := unix.Statfs(d, &st)
		if err == nil {
			if st.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("%s is not on a bpffs: pinned objects would not survive (use a path under %s)", dir, BPFFSRoot)
			}
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) || d == "/" {
			return fmt.Errorf("statfs %s: %w", d, err)
		}
	}
}

// DefaultPinPath is the bpffs directory for the state of a program on
// iface in the calling thread's network namespace:
// /sys/fs/bpf/xlb/<kind><netns inode>-<iface>. Agents in different
// namespaces (the lab runs several on one machine) never collide.
func DefaultPinPath(kind, iface string) (string, error) {
	if iface == "" || strings.ContainsRune(iface, '/') {
		return "", fmt.Errorf("invalid interface name %q", iface)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", fmt.Errorf("identify the network namespace: %w", err)
	}
	return filepath.Join(BPFFSRoot, "xlb", fmt.Sprintf("%s%d-%s", kind, st.Ino, iface)), nil
}
