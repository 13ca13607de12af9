package nodenat

import (
	"net/netip"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/backendhost"
)

// lingering remembers the translations that left the cluster's list, each
// until it expires (Options.Linger after it left), and adds them to the
// list the node applies.
type lingering struct {
	keep time.Duration
	// last is the cluster's list of the previous merge.
	last []backendhost.NATEntry
	// until holds each departed translation's expiry.
	until map[backendhost.NATEntry]time.Time
}

// newLingering starts with initial as the last list: those of its
// translations that the first merge does not have begin to linger then.
func newLingering(keep time.Duration, initial []backendhost.NATEntry) *lingering {
	return &lingering{keep: keep, last: initial, until: map[backendhost.NATEntry]time.Time{}}
}

// natKey is what SetNAT allows one target port for.
type natKey struct {
	vip, pod netip.Addr
	port     uint16
	proto    uint8
}

func keyOf(e backendhost.NATEntry) natKey {
	return natKey{vip: e.VIP, pod: e.PodIP, port: e.Port, proto: e.Proto}
}

// merge returns current (the cluster's list, sorted) with the departed
// translations that have not expired at now, sorted. A departed
// translation gives way to a current one for the same VIP:port and pod
// (a new target port), and is forgotten when it returns.
func (l *lingering) merge(current []backendhost.NATEntry, now time.Time) []backendhost.NATEntry {
	if l.keep <= 0 {
		return current
	}
	in := map[natKey]bool{}
	cur := make(map[backendhost.NATEntry]bool, len(current))
	for _, e := range current {
		in[keyOf(e)] = true
		cur[e] = true
		delete(l.until, e)
	}
	for _, e := range l.last {
		if !cur[e] {
			if _, ok := l.until[e]; !ok {
				l.until[e] = now.Add(l.keep)
			}
		}
	}
	l.last = current
	out := slices.Clone(current)
	for e, t := range l.until {
		switch {
		case !now.Before(t):
			delete(l.until, e)
		case in[keyOf(e)]:
			delete(l.until, e)
		default:
			out = append(out, e)
		}
	}
	slices.SortFunc(out, compareEntries)
	return out
}

// next returns the earliest expiry of a departed translation.
func (l *lingering) next() (time.Time, bool) {
	var first time.Time
	for _, t := range l.until {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first, !first.IsZero()
}
