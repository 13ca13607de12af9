// Package bpfobj is what xlb's eBPF programs share on a host: the pinned
// state's bpffs and its checks, the lock that keeps two agents off one pin
// path, attaching an XDP program through a pinned link, the layout record
// that tells whether pinned maps fit a program, and reading maps in bulk
// and per-CPU counters. The programs themselves are internal/dataplane/lb
// and internal/dataplane/decap; their shared layouts are
// internal/dataplane/wire.
package bpfobj

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// BPFFSRoot is where bpffs is (or gets) mounted.
const BPFFSRoot = "/sys/fs/bpf"

// EnsurePinFS makes sure that objects pinned at path outlive this
// process, as the data plane's restart safety needs: path lies on a
// bpffs that is mounted in the host's mount namespace (PID 1's). It
// mounts bpffs on BPFFSRoot when nothing is mounted there and this
// process runs in that namespace. It refuses a bpffs that would vanish
// with the process: `ip netns exec` gives each command a mount namespace
// and a /sys of its own, where a bpffs mounted (by xlb, or by a wrapper)
// dies with the command, and every program pinned in it with it.
func EnsurePinFS(path string) error {
	if !strings.HasPrefix(filepath.Clean(path)+"/", BPFFSRoot+"/") {
		return checkBPFFS(filepath.Dir(path))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(BPFFSRoot, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", BPFFSRoot, err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return checkShared(BPFFSRoot)
	}
	if err := mayMount(); err != nil {
		return err
	}
	if err := unix.Mount("bpf", BPFFSRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w (mount it yourself: mount -t bpf bpf %s)", BPFFSRoot, err, BPFFSRoot)
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
			return checkShared(d)
		}
		if !errors.Is(err, os.ErrNotExist) || d == "/" {
			return fmt.Errorf("statfs %s: %w", d, err)
		}
	}
}

// nsenterHint says how to run this very command so that it keeps the
// host's mount namespace.
func nsenterHint() string {
	netns := "NAME"
	if name := netnsName(); name != "" {
		netns = name
	}
	cmd := "xlb ..."
	if len(os.Args) > 0 {
		cmd = "xlb " + strings.Join(os.Args[1:], " ")
	}
	return fmt.Sprintf("run it with `nsenter --net=/run/netns/%s -- %s` instead of `ip netns exec`: nsenter enters the network namespace only, and the host's %s stays visible", netns, cmd, BPFFSRoot)
}

// mayMount reports why this process must not mount a bpffs of its own:
// unless it runs in PID 1's mount namespace, the mount (and the pins in
// it) would vanish with the process.
func mayMount() error {
	self := mountNS("self")
	pid1 := mountNS("1")
	if self != "" && self == pid1 {
		return nil
	}
	if self != "" && (pid1 != "" || private(self)) {
		return fmt.Errorf("no bpffs is mounted on %s in this process's mount namespace, which is not the host's (as under `ip netns exec`, which also gives the command a /sys of its own): "+
			"a bpffs that xlb mounted here would vanish when xlb exits, and the pinned programs and maps with it, so that nothing keeps forwarding; %s", BPFFSRoot, nsenterHint())
	}
	return fmt.Errorf("no bpffs is mounted on %s, and xlb cannot tell whether this is the host's mount namespace (it may not read /proc/1/ns/mnt): "+
		"a bpffs mounted in a namespace of this process alone would vanish when xlb exits, and the pinned programs and maps with it; "+
		"mount bpffs in the host's mount namespace (mount -t bpf bpf %s) and run xlb again, or, under `ip netns exec`, %s", BPFFSRoot, BPFFSRoot, nsenterHint())
}

// private reports whether the parent process runs in another mount
// namespace than self: this one was made for this process (ip netns
// exec, unshare -m).
func private(self string) bool {
	parent := mountNS(strconv.Itoa(os.Getppid()))
	return parent != "" && parent != self
}

// checkShared refuses the bpffs mounted at dir when it is an instance of
// this process's mount namespace alone: PID 1, or the parent process, runs
// in another mount namespace and has no mount of it.
func checkShared(dir string) error {
	self := mountNS("self")
	if self == "" {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	for _, pid := range []string{"1", strconv.Itoa(os.Getppid())} {
		ns := mountNS(pid)
		if ns == "" || ns == self {
			continue
		}
		devs, ok := bpfMounts(pid)
		if !ok {
			continue
		}
		if !devs[st.Dev] {
			return fmt.Errorf("the bpffs at %s is mounted in this process's mount namespace only, not in the host's (as when a bpffs is mounted under `ip netns exec`): "+
				"it would vanish when xlb exits, and the pinned programs and maps with it, so that nothing keeps forwarding; %s", dir, nsenterHint())
		}
		return nil
	}
	return nil
}

// mountNS identifies the mount namespace of process pid ("self" for this
// one); "" when it cannot be read.
func mountNS(pid string) string {
	l, err := os.Readlink(filepath.Join("/proc", pid, "ns", "mnt"))
	if err != nil {
		return ""
	}
	return l
}

// bpfMounts returns the devices of the bpffs instances mounted in the
// mount namespace of process pid; ok is false when its mount table
// cannot be read.
func bpfMounts(pid string) (devs map[uint64]bool, ok bool) {
	f, err := os.Open(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	devs = map[uint64]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, found := strings.Cut(sc.Text(), " - ")
		if !found || !strings.HasPrefix(post, "bpf ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 3 {
			continue
		}
		maj, min, found := strings.Cut(f[2], ":")
		a, err1 := strconv.ParseUint(maj, 10, 32)
		b, err2 := strconv.ParseUint(min, 10, 32)
		if found && err1 == nil && err2 == nil {
			devs[unix.Mkdev(uint32(a), uint32(b))] = true
		}
	}
	if sc.Err() != nil {
		return nil, false
	}
	return devs, true
}

// netnsName is the name under /run/netns of this process's network
// namespace, "" if it has none there.
func netnsName() string {
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		return ""
	}
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return ""
	}
	for _, e := range entries {
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/run/netns", e.Name()), &st) == nil && st.Ino == self.Ino && st.Dev == self.Dev {
			return e.Name()
		}
	}
	return ""
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

// Cleanup detaches and removes everything pinned under pinPath. Stop the
// agent first: while it runs it holds the link open.
func Cleanup(pinPath string) error {
	if pinPath == "" || pinPath == "/" || pinPath == BPFFSRoot {
		return fmt.Errorf("refusing to remove %q", pinPath)
	}
	if err := checkBPFFS(pinPath); err != nil {
		return err
	}
	if err := os.RemoveAll(pinPath); err != nil {
		return fmt.Errorf("remove %s: %w", pinPath, err)
	}
	// No agent runs on this state any more (Cleanup needs it stopped).
	return RemoveLock(pinPath)
}
