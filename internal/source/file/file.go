// Package file is the file source: it follows an agent configuration
// file and delivers every version of it, read once complete, or why one
// does not load. It reads the file again when its directory signals a
// change (inotify), when a poll of its stat sees one, and on SIGHUP.
package file

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/source"
)

// Name is the source's name in source.Update.
const Name = "file"

// DefaultPoll is how often the file's stat is compared, as a fallback
// for filesystems without inotify and directories that are replaced.
const DefaultPoll = 500 * time.Millisecond

// Options configure New.
type Options struct {
	Path string
	// Load reads and checks the file (the agent checks it against the
	// host's addresses too).
	Load func(path string) (*config.Config, error)
	// Poll and Settle default to DefaultPoll and Settle.
	Poll, Settle time.Duration
	Logger       *slog.Logger
}

// Source follows one file (a source.Source).
type Source struct {
	o       Options
	updates chan source.Update
	// stamp is the file's stat when it was last read, taken before
	// reading so that a write during the read brings another read. Owned
	// by Run.
	stamp stamp
}

var _ source.Source = (*Source)(nil)

// New prepares a source for a file its caller has just read: only a
// change from now on brings a new version. Run follows it.
func New(o Options) *Source {
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Settle <= 0 {
		o.Settle = Settle
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Source{o: o, updates: make(chan source.Update), stamp: stampOf(o.Path)}
}

// Updates delivers each version of the file read after New, or why it
// did not load; Trigger says what made the source read it.
func (s *Source) Updates() <-chan source.Update { return s.updates }

// Run follows the file until ctx ends. A changed file is read once it
// has been left alone for Settle, or at once when it was renamed into
// place; SIGHUP reads it at once, changed or not.
func (s *Source) Run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(s.o.Poll)
	defer tick.Stop()

	var written <-chan struct{}
	watch, err := watchDir(ctx, s.o.Path)
	if err != nil {
		s.o.Logger.Warn("cannot watch the configuration's directory; changes apply at the next poll", "error", err,
			"fix", "send SIGHUP after changing the file for an immediate reload")
	} else {
		written = watch.C
	}

	q := settling{settle: s.o.Settle}
	settled := time.NewTimer(time.Hour)
	settled.Stop()
	defer settled.Stop()
	// look reads the file if it changed and has settled (or was replaced
	// by a rename).
	look := func(trigger string, renamed bool) bool {
		ready, wait := q.observe(time.Now(), stampOf(s.o.Path), s.stamp, renamed)
		if ready {
			return s.read(ctx, trigger)
		}
		if wait > 0 {
			settled.Reset(wait)
		}
		return true
	}
	for ok := true; ok; {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			ok = s.read(ctx, "SIGHUP")
		case <-written:
			ok = look("file written", watch.take())
		case <-settled.C:
			ok = look("file changed", false)
		case <-tick.C:
			ok = look("file changed", false)
		}
	}
}

// read reads the file and delivers it; false once ctx ended.
func (s *Source) read(ctx context.Context, trigger string) bool {
	s.stamp = stampOf(s.o.Path)
	cfg, err := s.o.Load(s.o.Path)
	select {
	case s.updates <- source.Update{Config: cfg, Err: err, Source: Name, Trigger: trigger}:
		return true
	case <-ctx.Done():
		return false
	}
}
