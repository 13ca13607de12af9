package bpfobj

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

// Lock takes an exclusive lock on pinPath for this process's lifetime (the
// kernel drops it when the process exits, however it ends): an agent holds
// it while it programs the state pinned there. Close the file to release
// it.
func Lock(pinPath string) (*os.File, error) {
	f, holder, err := tryLock(pinPath)
	if holder != "" {
		return nil, fmt.Errorf("another xlb agent (%s) uses the pinned state at %s: stop it first, or give this one another dataplane.pinPath",
			holder, pinPath)
	}
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+", "+pinPath+"\n"), 0)
	}
	return f, nil
}

// LockForCleanup takes the lock that an agent holds on pinPath for as
// long as it runs, for whoever removes the pinned state (xlb cleanup), or
// says who holds it. Removing the pins under a running agent would not
// detach its program (the agent's own link handle keeps it attached until
// the agent exits) and would leave a restarted agent nothing to adopt;
// holding the lock also keeps an agent from starting on the state while
// it is removed. Cleanup or RemoveLock removes the lock file; release
// closes it.
func LockForCleanup(pinPath string) (release func(), err error) {
	f, holder, err := tryLock(pinPath)
	if holder != "" {
		return nil, fmt.Errorf("an xlb agent (%s) runs on the pinned state at %s: nothing removed; stop the agent first (its program keeps forwarding while it is stopped), then run xlb cleanup again",
			holder, pinPath)
	}
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// tryLock takes the lock of pinPath without waiting. If someone holds
// it, it returns what the holder wrote into the lock file (or the file's
// name if nothing), with an error.
func tryLock(pinPath string) (f *os.File, holder string, err error) {
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return nil, "", fmt.Errorf("create lock directory: %w", err)
	}
	name := LockFile(pinPath)
	f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("open lock %s: %w", name, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if holder = strings.TrimSpace(string(b)); holder == "" {
				holder = "see " + name
			}
			return nil, holder, errors.New("locked")
		}
		return nil, "", fmt.Errorf("lock %s: %w", name, err)
	}
	return f, "", nil
}

// LockFile is the lock file of pinPath, however the path is spelt.
func LockFile(pinPath string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(pinPath)))
	return filepath.Join(LockDir, hex.EncodeToString(sum[:8])+".lock")
}

// RemoveLock removes the lock file of pinPath, for whoever removes the
// pinned state itself (xlb cleanup, lab down) once no agent uses it.
func RemoveLock(pinPath string) error {
	if err := os.Remove(LockFile(pinPath)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove lock of %s: %w", pinPath, err)
	}
	return nil
}
