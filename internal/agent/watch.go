package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FileSettle is how long a changed configuration file must be left
// alone before the agent reads it: a writer still at work (a slow copy,
// an editor that writes in several steps, a disk filling up) changes the
// file's stamp again and restarts the wait. Replacing the file by rename
// (write elsewhere on the same filesystem, then rename over it) needs no
// wait to be safe; the agent waits all the same. SIGHUP reads the file
// at once.
const FileSettle = 500 * time.Millisecond

// settling follows a changed file until it has been left alone for settle.
type settling struct {
	settle time.Duration
	seen   stamp     // the last stamp observed that differs from the loaded one
	since  time.Time // when seen was first observed; zero: nothing pending
}

// observe takes the file's stamp s at now, loaded being the stamp of the
// configuration in use. It reports whether the file changed and has kept
// stamp s for settle; otherwise wait is how long to wait before looking
// again (0: nothing changed).
func (q *settling) observe(now time.Time, s, loaded stamp) (ready bool, wait time.Duration) {
	if s == loaded {
		q.since = time.Time{}
		return false, 0
	}
	if q.since.IsZero() || s != q.seen {
		q.seen, q.since = s, now
	}
	if left := q.settle - now.Sub(q.since); left > 0 {
		return false, left
	}
	q.since = time.Time{}
	return true, 0
}

// watchDir reports on the returned channel whenever the directory holding
// path sees a file written, renamed in or out, deleted or changed in its
// attributes, so that a configuration change applies without waiting for
// the next poll. Any name counts, not only path's: Kubernetes swaps a
// ConfigMap's files by renaming a symlink next to them. Writes (IN_MODIFY)
// count too, so that the wait for a file to settle (FileSettle) starts
// again at each. The caller compares the file's stamp, so spurious events
// cost one stat. Polling stays as the fallback (filesystems without
// inotify, a directory that is replaced).
func watchDir(ctx context.Context, path string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	dir := filepath.Dir(path)
	const mask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_ATTRIB
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	// A pipe wakes the poll when ctx ends: closing an fd that another
	// thread polls does not wake it.
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pipe: %w", err)
	}
	ch := make(chan struct{}, 1)
	// Each descriptor is closed by the goroutine that uses it, and only
	// once it is done with it: had the poller closed wake[1] (it may
	// return first, on an event after ctx ended), this write could land
	// in whatever file took that descriptor number meanwhile.
	go func() {
		<-ctx.Done()
		unix.Write(wake[1], []byte{0})
		unix.Close(wake[1])
	}()
	go func() {
		defer unix.Close(fd)
		defer unix.Close(wake[0])
		buf := make([]byte, 64*1024)
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(wake[0]), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			if fds[1].Revents != 0 || ctx.Err() != nil {
				return
			}
			if fds[0].Revents == 0 {
				continue
			}
			// The events' content does not matter: drain them all, then
			// signal once.
			for {
				if _, err := unix.Read(fd, buf); err != nil {
					break
				}
			}
			select {
			case ch <- struct{}{}:
			default: // one pending signal is enough
			}
		}
	}()
	return ch, nil
}
