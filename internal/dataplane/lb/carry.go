package lb

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// A migration (a map layout changed: another NATSessions, MaxBackends,
// an upgrade) creates fresh maps and programs them from the
// configuration. Sessions are not configuration: without a copy, every
// connection through a NAT service would break. So the NAT state is
// carried over from the maps the old program keeps using until the
// switch: once when the new maps are created (Load), and once more right
// after the program switched (Attach), for the sessions opened in
// between. Entries go in with BPF_NOEXIST, so a session the new program
// opened itself is never overwritten; a reverse key before its forward
// entry, and a forward entry only if its session made it. A table that
// shrank takes what fits. State whose layout changed otherwise than in
// size starts empty, but for the forward tables: a carried session
// without a forward entry gets one made from the session itself.

// natCarried are the maps carried over, the sessions' reverse tables
// before their forward ones.
var natCarried = []string{"nat_cfg", "nat_dnat_be", "nat_rev", "nat_rev_syn", "nat_fwd", "nat_fwd_syn"}

// derived are the carried maps whose entries the sessions also give
// (rebuildForward): one of another layout is made anew, not lost.
var derived = map[string]bool{"nat_fwd": true, "nat_fwd_syn": true}

// natCarry is the old NAT state a migration carries over, open from Load
// to Attach.
type natCarry struct {
	old           map[string]*ebpf.Map
	carried, lost int
	incompatible  []string
}

// openCarry opens the NAT maps pinned under pinPath whose layout, but for
// their size, is spec's: the pinned layout record says so.
func openCarry(pinPath string, spec *ebpf.CollectionSpec) (*natCarry, error) {
	c := &natCarry{old: map[string]*ebpf.Map{}}
	rec, err := bpfobj.ReadLayout(pinPath)
	if err != nil {
		// No record (an xlb from before them, which had no NAT) or an
		// unreadable one: nothing to carry.
		return c, nil
	}
	for _, name := range natCarried {
		fp, ok := rec.Maps[name]
		if !ok {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, name), nil)
		if err != nil {
			continue
		}
		want := spec.Maps[name].Copy()
		want.MaxEntries = m.MaxEntries()
		if bpfobj.Fingerprint(want) != fp {
			m.Close()
			if !derived[name] {
				c.incompatible = append(c.incompatible, name)
			}
			continue
		}
		c.old[name] = m
	}
	return c, nil
}

func (c *natCarry) close() {
	for _, m := range c.old {
		m.Close()
	}
	c.old = nil
}

// carry copies what the old maps hold and the new ones lack into d's.
// Sessions that did not fit count as lost in the last pass only: a later
// pass tries them again.
func (c *natCarry) carry(d *Dataplane) error {
	news := d.Maps()
	c.lost = 0
	if old := c.old["nat_cfg"]; old != nil {
		var cfg wire.NATCfg
		if err := old.Lookup(uint32(0), &cfg); err == nil && cfg != (wire.NATCfg{}) {
			if err := news["nat_cfg"].Put(uint32(0), cfg); err != nil {
				return fmt.Errorf("carry the NAT settings over: %w", err)
			}
		}
	}
	if old := c.old["nat_dnat_be"]; old != nil {
		var k wire.NATBackendKey
		var v uint8
		it := old.Iterate()
		for it.Next(&k, &v) {
			if err := news["nat_dnat_be"].Update(&k, &v, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
				return fmt.Errorf("carry the dnat backends over: %w", err)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("carry the dnat backends over: %w", err)
		}
	}
	for _, name := range []string{"nat_rev", "nat_rev_syn"} {
		old := c.old[name]
		if old == nil {
			continue
		}
		var sessions []wire.SessionKey
		var vals []wire.Session
		if err := walkSessions(old, func(k *wire.SessionKey, v *wire.Session) {
			sessions, vals = append(sessions, *k), append(vals, *v)
		}); err != nil {
			return err
		}
		for i := range sessions {
			err := news[name].Update(&sessions[i], &vals[i], ebpf.UpdateNoExist)
			switch {
			case err == nil:
				c.carried++
			case errors.Is(err, ebpf.ErrKeyExist):
			case errors.Is(err, unix.E2BIG):
				c.lost++
			default:
				return fmt.Errorf("carry sessions over: %w", err)
			}
		}
	}
	if err := carryForwardTable(c.old["nat_fwd"], news, "nat_fwd", func(v *wire.SessionFwd) *wire.SessionKey { return &v.Rk }); err != nil {
		return err
	}
	if err := carryForwardTable(c.old["nat_fwd_syn"], news, "nat_fwd_syn", func(v *wire.SessionKey) *wire.SessionKey { return v }); err != nil {
		return err
	}
	return rebuildForward(news)
}

// carryForwardTable puts the entries of old forward table old (nil: none)
// into table name of maps, each whose session (rk of its value) made it
// there and whose key is free.
func carryForwardTable[V any](old *ebpf.Map, maps map[string]*ebpf.Map, name string, rk func(*V) *wire.SessionKey) error {
	if old == nil {
		return nil
	}
	var keys []wire.SessionKey
	var vals []V
	var k wire.SessionKey
	var v V
	it := old.Iterate()
	for it.Next(&k, &v) {
		keys, vals = append(keys, k), append(vals, v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("carry sessions over: %w", err)
	}
	for i := range keys {
		if !hasSession(maps, rk(&vals[i])) {
			continue
		}
		err := maps[name].Update(&keys[i], &vals[i], ebpf.UpdateNoExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) && !errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("carry sessions over: %w", err)
		}
	}
	return nil
}

// rebuildForward gives every session of maps without a forward entry one
// made from the session (the old forward tables were of another layout,
// or lost an entry): a session whose client's packets find nothing would
// end at the next one. Of two sessions of one client 5-tuple, the later
// one gets it, as the program would have given it.
func rebuildForward(maps map[string]*ebpf.Map) error {
	for _, t := range []struct {
		rev, fwd string
		est      bool
	}{{"nat_rev", "nat_fwd", true}, {"nat_rev_syn", "nat_fwd_syn", false}} {
		type pick struct {
			rk wire.SessionKey
			v  wire.Session
		}
		best := map[wire.SessionKey]pick{}
		if err := walkSessions(maps[t.rev], func(k *wire.SessionKey, v *wire.Session) {
			fk := forwardKey(k, v)
			if b, ok := best[fk]; !ok || int64(v.Last-b.v.Last) > 0 {
				best[fk] = pick{*k, *v}
			}
		}); err != nil {
			return fmt.Errorf("rebuild forward entries: %w", err)
		}
		for fk, b := range best {
			var v any = &b.rk
			if t.est {
				f := forwardEntry(&b.rk, &b.v)
				v = &f
			}
			err := maps[t.fwd].Update(&fk, v, ebpf.UpdateNoExist)
			if err != nil && !errors.Is(err, ebpf.ErrKeyExist) && !errors.Is(err, unix.E2BIG) {
				return fmt.Errorf("rebuild forward entries: %w", err)
			}
		}
	}
	return nil
}

// hasSession says whether reverse key k has a session in the maps.
func hasSession(maps map[string]*ebpf.Map, k *wire.SessionKey) bool {
	var s wire.Session
	return maps["nat_rev"].Lookup(k, &s) == nil || maps["nat_rev_syn"].Lookup(k, &s) == nil
}

// summary says what the carry did, for the migration's reason.
func (c *natCarry) summary() string {
	if len(c.incompatible) > 0 {
		return fmt.Sprintf("; NAT state of another layout (%v) starts empty", c.incompatible)
	}
	if c.carried == 0 && c.lost == 0 {
		return ""
	}
	s := fmt.Sprintf("; %d NAT sessions carried over", c.carried)
	if c.lost > 0 {
		s += fmt.Sprintf(", %d did not fit (natSessions is smaller)", c.lost)
	}
	return s
}

// CarriedSessions says how many NAT sessions the migration of Load (and
// Attach, once it ran) carried over from the old maps, and how many did
// not fit.
func (d *Dataplane) CarriedSessions() (carried, lost int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nat.carried, d.nat.lost
}
