package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Settle is how long a configuration file changed in place must be
// left alone before the source reads it: a writer still at work (a slow
// copy, an editor that writes in several steps, a disk filling up)
// changes the file's stamp again and restarts the wait. A file replaced
// by rename (written elsewhere on the same filesystem, then renamed over
// it, or a Kubernetes ConfigMap's symlink swap) is complete when it
// appears: the source reads it at once. So does SIGHUP.
const Settle = 500 * time.Millisecond

// settling follows a changed file until it has been left alone for settle.
type settling struct {
	settle time.Duration
	seen   stamp     // the last stamp observed that differs from the loaded one
	since  time.Time // when seen was first observed; zero: nothing pending
}

// observe takes the file's stamp s at now, loaded being the stamp of the
// configuration in use; renamed says that a file was just renamed into
// the directory. It reports whether the file changed and is complete:
// replaced by another file (a new inode) by a rename, or kept stamp s
// for settle. Otherwise wait is how long to wait before looking again
// (0: nothing changed).
func (q *settling) observe(now time.Time, s, loaded stamp, renamed bool) (ready bool, wait time.Duration) {
	if s == loaded {
		q.since = time.Time{}
		return false, 0
	}
	if renamed && s.err == "" && (s.ino != loaded.ino || s.dev != loaded.dev) {
		q.since = time.Time{}
		return true, 0
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

// dirWatch signals events in a directory (watchDir).
type dirWatch struct {
	C       <-chan struct{}
	mu      sync.Mutex
	renamed bool // a file was renamed in since the last take
}

// take reports whether a file was renamed into the directory since the
// last take.
func (w *dirWatch) take() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.renamed
	w.renamed = false
	return r
}

// watchDir signals on C whenever the directory holding path sees a file
// written, renamed in or out, deleted or changed in its attributes, so
// that a configuration change applies without waiting for the next poll.
// Any name counts, not only path's: Kubernetes swaps a ConfigMap's files
// by renaming a symlink next to them. Writes (IN_MODIFY) count too, so
// that the wait for a file to settle (Settle) starts again at each.
// The caller compares the file's stamp, so spurious events cost one stat.
// Polling stays as the fallback (filesystems without inotify, a
// directory that is replaced).
func watchDir(ctx context.Context, path string) (*dirWatch, error) {
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
	w := &dirWatch{C: ch}
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
			// Drain every event, note whether a file was renamed in,
			// then signal once.
			renamed := false
			for {
				n, err := unix.Read(fd, buf)
				if err != nil || n <= 0 {
					break
				}
				renamed = renamed || hasRename(buf[:n])
			}
			if renamed {
				w.mu.Lock()
				w.renamed = true
				w.mu.Unlock()
			}
			select {
			case ch <- struct{}{}:
			default: // one pending signal is enough
			}
		}
	}()
	return w, nil
}

// hasRename reports whether a buffer of inotify events holds one of a
// file renamed into the directory (IN_MOVED_TO).
func hasRename(buf []byte) bool {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		if ev.Mask&unix.IN_MOVED_TO != 0 {
			return true
		}
		next := unix.SizeofInotifyEvent + int(ev.Len)
		if next > len(buf) {
			break
		}
		buf = buf[next:]
	}
	return false
}

// stamp identifies a version of the configuration file. Editors replace
// files by rename (new inode) or rewrite them in place (new mtime/size);
// Kubernetes swaps a symlink (os.Stat follows it to a new inode).
type stamp struct {
	err   string
	mtime int64
	size  int64
	ino   uint64
	dev   uint64
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		// A vanished file is a change too: the reload then reports why.
		var pe *os.PathError
		if errors.As(err, &pe) {
			return stamp{err: pe.Err.Error()}
		}
		return stamp{err: err.Error()}
	}
	s := stamp{mtime: fi.ModTime().UnixNano(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino, s.dev = st.Ino, st.Dev
	}
	return s
}
