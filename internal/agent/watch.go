package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// watchDir reports on the returned channel whenever the directory holding
// path sees a file written and closed, renamed in or out, deleted or
// changed in its attributes, so that a configuration change applies at
// once instead of at the next poll. Any name counts, not only path's:
// Kubernetes swaps a ConfigMap's files by renaming a symlink next to
// them. Files being written (IN_MODIFY) and just created (IN_CREATE) do
// not count: their content is not complete yet. The caller compares the
// file's stamp, so spurious events cost one stat. Polling stays as the
// fallback (filesystems without inotify, a directory that is replaced).
func watchDir(ctx context.Context, path string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	dir := filepath.Dir(path)
	const mask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_ATTRIB
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
