package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockDir holds one lock file per pin path in use. bpffs cannot hold a
// lock itself, and two agents writing the same pinned maps would undo
// each other's work.
var LockDir = "/run/xlb/locks"

// lockPinPath takes an exclusive lock on pinPath for this process's
// lifetime (the kernel drops it when the process exits, however it ends).
func lockPinPath(pinPath string) (*os.File, error) {
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return nil, fmt.Errorf("create lock directory: %w", err)
	}
	name := lockFile(pinPath)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", name, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another xlb agent (%s) uses the pinned state at %s: stop it first, or give this one another dataplane.pinPath",
				strings.TrimSpace(string(holder)), pinPath)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+", "+pinPath+"\n"), 0)
	}
	return f, nil
}

// lockFile is the lock file of pinPath.
func lockFile(pinPath string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(pinPath)))
	return filepath.Join(LockDir, hex.EncodeToString(sum[:8])+".lock")
}

// RemoveLock removes the lock file of pinPath, for whoever removes the
// pinned state itself (xlb cleanup, lab down) once no agent uses it.
func RemoveLock(pinPath string) error {
	if err := os.Remove(lockFile(pinPath)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove lock of %s: %w", pinPath, err)
	}
	return nil
}
