package lb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// NAT and DNAT services keep a session per connection in the program's
// maps (bpf/xlb_lbnat.h): the established tables nat_fwd (client's
// 5-tuple -> the session's reverse key, with the backend, state and
// timestamp the client's packets read there) and nat_rev (reverse key,
// the reply's 5-tuple and the port's claim -> the session), and their
// embryonic twins nat_fwd_syn (client's 5-tuple -> reverse key) and
// nat_rev_syn, LRU maps for sessions not
// established yet: their backend has not answered, or their client has
// sent nothing since it did (a spoofed source never does). The program
// opens, moves, stamps
// and expires sessions by itself; this file configures it (SetNAT), reads
// what it did, and sweeps what expired off the packet path.
// docs/decisions/0007-nat-sessions.md has the design and its figures.

// NATConfig is node-wide and hot: SetNAT may be called at start and on
// every reload.
type NATConfig struct {
	Address          netip.Addr    // source of full-NAT sessions towards backends (the node's own address)
	PortMin, PortMax uint16        // the ports allocated on Address, per backend addr:port and protocol
	TCPSyn           time.Duration // a TCP session that has not seen the backend's reply
	TCPEstablished   time.Duration // idle established TCP
	TCPClosing       time.Duration // after FIN or RST
	UDP              time.Duration // idle UDP
	// TCPTimeWait is how long a backend that closed first keeps the
	// connection in TIME_WAIT: its port goes to a new session to that
	// backend meanwhile only if the search finds no other free one.
	TCPTimeWait time.Duration
}

// The NAT settings a zero field of NATConfig stands for, and what a new
// program starts with until SetNAT (the configuration's defaults).
const (
	defaultNATPortMin        = 20000
	defaultNATPortMax        = 32767
	defaultNATTCPSyn         = 5 * time.Second
	defaultNATTCPEstablished = time.Hour
	defaultNATTCPClosing     = 10 * time.Second
	defaultNATUDP            = 60 * time.Second
	defaultNATTCPTimeWait    = 60 * time.Second
)

// NATCounters are the node-wide NAT counters and gauges.
type NATCounters struct {
	Sessions       uint64 // in use now (established and embryonic)
	Embryonic      uint64 // in use now, not established: no reply from the backend yet, or no packet from the client since
	Created        uint64
	AllocFailures  uint64 // no free port (or no room) for a new session
	Expired        uint64 // ended by their timeout
	ReverseMisses  uint64 // packets from a backend address:port with no session (passed to the kernel)
	NoReply        uint64 // sessions that expired without one reply from the backend (dnat: the route back does not go through the node)
	Fragments      uint64 // IP fragments to NAT services, dropped
	ICMPTranslated uint64
}

// Session is one NAT session, for `xlb status --sessions`.
type Session struct {
	Protocol  uint8 // 6 or 17
	Client    netip.AddrPort
	VIP       netip.AddrPort
	Backend   netip.AddrPort
	BackendID uint32
	Source    netip.AddrPort // what the backend sees as the source: NATConfig.Address:port (nat) or Client (dnat)
	State     string         // "syn" (TCP, not established: answered or not, see Replied), "established", "closing", "udp"
	Replied   bool           // the backend has answered
	Idle      time.Duration
}

// natState is the data plane's side of the sessions: the settings as
// written, and what the last sweep saw.
type natState struct {
	// mu serialises the sweeps and the writes of nat_cfg; taken before
	// the data plane's mu when both are held.
	mu  sync.Mutex
	cfg wire.NATCfg
	// gauges are the session counts of the last complete sweep, and
	// counted when it completed; swept is when ExpireSessions last ran,
	// sweep where it stands.
	gauges  sessionCounts
	counted time.Time
	swept   time.Time
	sweep   sweep
	dnatOld map[wire.NATBackendKey]bool
	// carry is the NAT state a migration carries over, from Load to
	// Attach; carried and lost count its sessions.
	carry         *natCarry
	carried, lost int
}

// sessionCounts are sessions in use, and of them the embryonic ones (in
// the embryonic tables).
type sessionCounts struct{ sessions, embryonic uint64 }

// gaugesFresh is how long ago a sweep may have run for NATCounters to
// report the gauges of the last complete one instead of counting (the
// agent sweeps every second), and gaugesOld how long ago that one may
// have completed (a full default table takes a few sweeps).
const (
	gaugesFresh = 2 * time.Second
	gaugesOld   = 15 * time.Second
)

// monotonicNow is the program's clock (bpf_ktime_get_coarse_ns), in
// nanoseconds.
func monotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		// Not on Linux, or a kernel without it: the fine clock is the
		// same clock, a tick ahead at most.
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	}
	return uint64(ts.Nano())
}

// initNAT reads the settings the pinned nat_cfg holds; fresh maps get the
// default timeouts, so that dnat sessions work before SetNAT.
func (d *Dataplane) initNAT() error {
	var c wire.NATCfg
	if err := d.objs.NatCfg.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("read NAT settings: %w", err)
	}
	if c == (wire.NATCfg{}) {
		c = natCfg(NATConfig{}, 0)
		if err := d.objs.NatCfg.Put(uint32(0), c); err != nil {
			return fmt.Errorf("write NAT settings: %w", err)
		}
	}
	d.nat.cfg = c
	return nil
}

// natCfg is c as the program reads it, with flags; zero fields take
// their defaults. c is checked.
func natCfg(c NATConfig, flags uint32) wire.NATCfg {
	or := func(v, def time.Duration) uint64 {
		if v == 0 {
			v = def
		}
		return uint64(v.Nanoseconds())
	}
	w := wire.NATCfg{
		PortMin: c.PortMin, PortMax: c.PortMax, Flags: flags,
		TcpSynNs:         or(c.TCPSyn, defaultNATTCPSyn),
		TcpEstablishedNs: or(c.TCPEstablished, defaultNATTCPEstablished),
		TcpClosingNs:     or(c.TCPClosing, defaultNATTCPClosing),
		UdpNs:            or(c.UDP, defaultNATUDP),
		TcpTimeWaitNs:    or(c.TCPTimeWait, defaultNATTCPTimeWait),
	}
	if c.Address.IsValid() {
		w.Addr = wire.AddrOf(c.Address)
	}
	if w.PortMin == 0 && w.PortMax == 0 {
		w.PortMin, w.PortMax = defaultNATPortMin, defaultNATPortMax
	}
	return w
}

// SetNAT makes c the node's NAT settings, at once for every packet. An
// invalid Address (the zero netip.Addr) opens no full-NAT session (dnat
// needs none); zero ports or durations take the defaults (20000-32767,
// 5s, 1h, 10s, 60s, 60s). Sessions keep the address and port they were given:
// one whose port a new range leaves out, or whose address is no longer
// the NAT address, no longer gets its replies.
func (d *Dataplane) SetNAT(c NATConfig) error {
	if c.Address.IsValid() && (!c.Address.Is4() || c.Address.IsUnspecified()) {
		return fmt.Errorf("NAT address %v: a usable IPv4 address is required", c.Address)
	}
	if (c.PortMin != 0 || c.PortMax != 0) && (c.PortMin == 0 || c.PortMin > c.PortMax) {
		return fmt.Errorf("NAT ports %d-%d: want 1 <= min <= max", c.PortMin, c.PortMax)
	}
	for name, v := range map[string]time.Duration{"tcpSyn": c.TCPSyn, "tcpEstablished": c.TCPEstablished, "tcpClosing": c.TCPClosing, "udp": c.UDP, "tcpTimeWait": c.TCPTimeWait} {
		if v < 0 {
			return fmt.Errorf("NAT timeout %s %v: must not be negative", name, v)
		}
	}
	d.nat.mu.Lock()
	defer d.nat.mu.Unlock()
	return d.writeNATCfg(natCfg(c, d.nat.cfg.Flags))
}

// writeNATCfg writes the settings whole. Called with nat.mu held.
func (d *Dataplane) writeNATCfg(c wire.NATCfg) error {
	if err := d.objs.NatCfg.Put(uint32(0), c); err != nil {
		return fmt.Errorf("write NAT settings: %w", err)
	}
	d.nat.cfg = c
	return nil
}

// enableDNAT makes the reverse path look up the packets of the dnat
// backends, before a dnat service can open its first session.
func (d *Dataplane) enableDNAT() error {
	d.nat.mu.Lock()
	defer d.nat.mu.Unlock()
	if d.nat.cfg.Flags&wire.NATCfgDNAT != 0 {
		return nil
	}
	c := d.nat.cfg
	c.Flags |= wire.NATCfgDNAT
	return d.writeNATCfg(c)
}

// NATCounters returns the node-wide NAT counters, and the sessions in use
// as the last complete sweep (ExpireSessions) counted them while sweeps
// run, or as a count of its own when none ran in the last two seconds.
func (d *Dataplane) NATCounters() (NATCounters, error) {
	st, err := d.natStats()
	if err != nil {
		return NATCounters{}, err
	}
	d.nat.mu.Lock()
	g := d.nat.gauges
	fresh := time.Since(d.nat.swept) < gaugesFresh && time.Since(d.nat.counted) < gaugesOld
	d.nat.mu.Unlock()
	if !fresh {
		if g, err = d.countSessions(); err != nil {
			return NATCounters{}, err
		}
	}
	return NATCounters{
		Sessions:       g.sessions,
		Embryonic:      g.embryonic,
		Created:        st[wire.LBNATCreated],
		AllocFailures:  st[wire.LBNATAllocFailed] + st[wire.LBNATPromoteFailed],
		Expired:        st[wire.LBNATExpired],
		ReverseMisses:  st[wire.LBNATRevMiss],
		NoReply:        st[wire.LBNATNoReply],
		Fragments:      st[wire.LBNATFragment],
		ICMPTranslated: st[wire.LBNATICMP],
	}, nil
}

// NATStatCounters returns every NAT counter by name (wire.LBNATStatNames):
// the program's, summed over the CPUs, plus the sweeps'.
func (d *Dataplane) NATStatCounters() (map[string]uint64, error) {
	st, err := d.natStats()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(st))
	for i, name := range wire.LBNATStatNames {
		out[name] = st[i]
	}
	return out, nil
}

// natStats sums each NAT counter over the CPUs and adds the sweeps'.
func (d *Dataplane) natStats() ([]uint64, error) {
	out := make([]uint64, len(wire.LBNATStatNames))
	for i, name := range wire.LBNATStatNames {
		var per []uint64
		if err := d.objs.NatCounters.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read NAT counter %s: %w", name, err)
		}
		for _, n := range per {
			out[i] += n
		}
		var swept uint64
		if err := d.objs.NatSwept.Lookup(uint32(i), &swept); err != nil {
			return nil, fmt.Errorf("read NAT counter %s: %w", name, err)
		}
		out[i] += swept
	}
	return out, nil
}

// addSwept adds n to the sweeps' counter stat. Called with nat.mu held:
// the sweeps are its only writers.
func (d *Dataplane) addSwept(stat uint32, n uint64) error {
	if n == 0 {
		return nil
	}
	var v uint64
	if err := d.objs.NatSwept.Lookup(stat, &v); err != nil {
		return fmt.Errorf("read NAT counter %s: %w", wire.LBNATStatNames[stat], err)
	}
	if err := d.objs.NatSwept.Put(stat, v+n); err != nil {
		return fmt.Errorf("write NAT counter %s: %w", wire.LBNATStatNames[stat], err)
	}
	return nil
}

// embryonicTables is the embryonic tables' index in sessionTables.
const embryonicTables = 1

// sessionTables are the session tables, established first: each reverse
// table with the forward table of its sessions.
func (d *Dataplane) sessionTables() [2]struct{ fwd, rev *ebpf.Map } {
	return [2]struct{ fwd, rev *ebpf.Map }{
		{d.objs.NatFwd, d.objs.NatRev},
		{d.objs.NatFwdSyn, d.objs.NatRevSyn},
	}
}

// walkSessions calls fn with every session of reverse table m, read in
// batches. fn must not keep k or v.
func walkSessions(m *ebpf.Map, fn func(k *wire.SessionKey, v *wire.Session)) error {
	var cursor ebpf.MapBatchCursor
	_, err := walkSome(m, &cursor, -1, fn)
	return err
}

// sessionBatch is how many sessions one read of a table returns.
const sessionBatch = 4096

// walkSome calls fn with the sessions of reverse table m from cursor on,
// in batches, until about limit of them were read (limit < 0: all) or
// the table ends. It says whether it ended; the cursor then starts over.
func walkSome(m *ebpf.Map, cursor *ebpf.MapBatchCursor, limit int, fn func(k *wire.SessionKey, v *wire.Session)) (bool, error) {
	keys := make([]wire.SessionKey, sessionBatch)
	vals := make([]wire.Session, sessionBatch)
	for read := 0; limit < 0 || read < limit; {
		n, err := m.BatchLookup(cursor, keys, vals, nil)
		for i := range n {
			fn(&keys[i], &vals[i])
		}
		read += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			*cursor = ebpf.MapBatchCursor{}
			return true, nil
		}
		if err != nil {
			*cursor = ebpf.MapBatchCursor{}
			return false, fmt.Errorf("read sessions of %v: %w", m, err)
		}
	}
	return false, nil
}

// forwardKey is the forward key of session (k, v).
func forwardKey(k *wire.SessionKey, v *wire.Session) wire.SessionKey {
	return wire.SessionKey{Src: v.Client, Dst: v.Vip, Sport: v.ClientPort, Dport: v.VipPort, Proto: k.Proto}
}

// forwardEntry is the established forward entry of session (k, v), as
// the program makes it when it establishes the session.
func forwardEntry(k *wire.SessionKey, v *wire.Session) wire.SessionFwd {
	return wire.SessionFwd{Rk: *k, Last: v.Last, BackendId: v.BackendId, State: v.State}
}

// forwardNames says whether forward table fwd's entry fk names session
// k: an established table holds wire.SessionFwd values, an embryonic one
// the reverse key alone.
func forwardNames(fwd *ebpf.Map, fk, k *wire.SessionKey) bool {
	if fwd.ValueSize() == uint32(binary.Size(wire.SessionFwd{})) {
		var cur wire.SessionFwd
		return fwd.Lookup(fk, &cur) == nil && cur.Rk == *k
	}
	var cur wire.SessionKey
	return fwd.Lookup(fk, &cur) == nil && cur == *k
}

// joinForward adds to session (k, *v) of an established table what its
// forward entry in fwd knows (the program's lbnat_merge): the client's
// packets stamp only that one, and a state that closed is in both.
func joinForward(fwd *ebpf.Map, k *wire.SessionKey, v *wire.Session) {
	fk := forwardKey(k, v)
	var f wire.SessionFwd
	if fwd.Lookup(&fk, &f) != nil || f.Rk != *k {
		return
	}
	if int64(f.Last-v.Last) > 0 {
		v.Last = f.Last
	}
	if f.State == wire.SessionClosing {
		v.State = wire.SessionClosing
	}
}

// removeSession deletes session k from reverse table rev and its forward
// entry from fwd, if that still names k: forward entry first, as the
// program does. It says whether this call removed the session.
func removeSession(fwd, rev *ebpf.Map, k *wire.SessionKey, v *wire.Session) (bool, error) {
	fk := forwardKey(k, v)
	if forwardNames(fwd, &fk, k) {
		if err := fwd.Delete(&fk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, fmt.Errorf("delete session: %w", err)
		}
	}
	if err := rev.Delete(k); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("delete session: %w", err)
	}
	// The program may have established the session in between: its
	// client's packets read the forward entry alone, which must not
	// outlive the session.
	if forwardNames(fwd, &fk, k) {
		if err := fwd.Delete(&fk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, fmt.Errorf("delete session: %w", err)
		}
	}
	return true, nil
}

// timeout is the timeout of a session in state, by the settings c.
func timeout(c *wire.NATCfg, state uint8) uint64 {
	switch state {
	case wire.SessionEstablished:
		return c.TcpEstablishedNs
	case wire.SessionClosing:
		return c.TcpClosingNs
	case wire.SessionUDP:
		return c.UdpNs
	}
	return c.TcpSynNs
}

// expired says whether session v is past its timeout at now, as the
// program decides it.
func expired(c *wire.NATCfg, v *wire.Session, now uint64) bool {
	return int64(now-v.Last) > int64(timeout(c, v.State))
}

// sweepBudget is about how many sessions one ExpireSessions reads: a
// full default table (262144 established sessions) takes several calls,
// so that the agent's sweep every second costs a bounded share of a CPU
// (docs/decisions/0007-nat-sessions.md has the figures).
const sweepBudget = 65536

// sweep is where the sweep of the session tables stands: it goes through
// them a budget at a time, and what it counts and finds in use holds once
// a cycle through both completed.
type sweep struct {
	cursor  [2]ebpf.MapBatchCursor
	done    [2]bool
	pending sessionCounts
	live    map[wire.NATBackendKey]bool
}

// ExpireSessions removes sessions whose timeout passed (the packet path
// already treats them as gone; this reclaims their memory) and returns
// how many. The agent calls it periodically, off the packet path. Each
// call reads about sweepBudget sessions, where the last one stopped, so a
// large table takes several calls to go through. A completed pass counts
// the sessions in use (NATCounters) and lets go of the dnat backends no
// service names and no session uses any more.
//
// The sessions read past their timeout go to the program xlb_nat_reap
// (bpf/xlb_lb.c), reapBatch at a time, which reaps each one still past
// it by the packet path's own rule and counts it as the packet path
// does; the others live on. One system call per batch: removing a
// session from here took seven (BenchmarkNATSweepExpired).
func (d *Dataplane) ExpireSessions() (int, error) {
	d.nat.mu.Lock()
	defer d.nat.mu.Unlock()
	sw := &d.nat.sweep
	if sw.live == nil {
		sw.live = map[wire.NATBackendKey]bool{}
	}
	c := d.nat.cfg
	now := monotonicNow()
	live := func(i int, k *wire.SessionKey, flags uint8) {
		sw.pending.sessions++
		if i == embryonicTables {
			sw.pending.embryonic++
		}
		if flags&wire.SessionDNAT != 0 {
			sw.live[wire.NATBackendKey{Addr: k.Src, Port: k.Sport, Proto: k.Proto}] = true
		}
	}
	removed, budget := 0, sweepBudget
	var args reapArgs
	var flags [reapBatch]uint8
	for i, t := range d.sessionTables() {
		if sw.done[i] {
			continue
		}
		args.Est = 1
		if i == embryonicTables {
			args.Est = 0
		}
		var reapErr error
		reap := func() {
			if args.N == 0 || reapErr != nil {
				return
			}
			// As bytes: encoding the struct by reflection cost more
			// than the run.
			buf := unsafe.Slice((*byte)(unsafe.Pointer(&args)), unsafe.Sizeof(args))
			if _, err := d.objs.XlbNatReap.Run(&ebpf.RunOptions{Context: buf, ContextOut: buf}); err != nil {
				reapErr = fmt.Errorf("reap expired sessions: %w", err)
				return
			}
			for j := range args.N {
				switch {
				case args.Reaped&(1<<j) != 0:
					removed++
				case args.Alive&(1<<j) != 0:
					live(i, &args.Keys[j], flags[j])
				}
			}
			args.N = 0
		}
		read := 0
		done, err := walkSome(t.rev, &sw.cursor[i], budget, func(k *wire.SessionKey, v *wire.Session) {
			read++
			// By the reverse entry's stamp alone: the program joins
			// the client's side's in.
			if !expired(&c, v, now) {
				live(i, k, v.Flags)
				return
			}
			args.Keys[args.N], flags[args.N] = *k, v.Flags
			if args.N++; args.N == reapBatch {
				reap()
			}
		})
		reap()
		if err == nil {
			err = reapErr
		}
		if err != nil {
			return removed, err
		}
		sw.done[i] = done
		budget -= read
		if budget <= 0 {
			break
		}
	}
	d.nat.swept = time.Now()
	if !sw.done[0] || !sw.done[1] {
		return removed, nil
	}
	d.nat.gauges, d.nat.counted = sw.pending, time.Now()
	inUse := sw.live
	*sw = sweep{live: map[wire.NATBackendKey]bool{}}
	return removed, d.sweepDNATBackends(inUse)
}

// reapBatch is how many sessions one run of xlb_nat_reap takes
// (LBNAT_REAP_BATCH).
const reapBatch = 64

// reapArgs is xlb_nat_reap's context (struct lbnat_reap_args): the
// reverse keys of sessions of the established tables (Est 1) or the
// embryonic ones, and on return which were reaped and which live on.
type reapArgs struct {
	N, Est        uint32
	Reaped, Alive uint64
	Keys          [reapBatch]wire.SessionKey
}

// countSessions walks the sessions to count them (NATCounters between
// sweeps).
func (d *Dataplane) countSessions() (sessionCounts, error) {
	var g sessionCounts
	for i, t := range d.sessionTables() {
		err := walkSessions(t.rev, func(_ *wire.SessionKey, _ *wire.Session) {
			g.sessions++
			if i == embryonicTables {
				g.embryonic++
			}
		})
		if err != nil {
			return g, err
		}
	}
	return g, nil
}

// sweepDNATBackends removes from nat_dnat_be the backends that no dnat
// service names and that no session in live uses, once two complete
// sweeps in a row found them so (a session the program opened from a
// table being replaced, after a sweep read its bucket, is seen by the
// next), and
// turns the dnat lookups off when none is left and no dnat service is
// installed. Called with nat.mu held.
func (d *Dataplane) sweepDNATBackends(live map[wire.NATBackendKey]bool) error {
	d.mu.Lock()
	named, anyDNAT := d.dnatBackends()
	d.mu.Unlock()
	var keys []wire.NATBackendKey
	var k wire.NATBackendKey
	var one uint8
	it := d.objs.NatDnatBe.Iterate()
	for it.Next(&k, &one) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read dnat backends: %w", err)
	}
	stale := map[wire.NATBackendKey]bool{}
	left := 0
	for _, k := range keys {
		if named[k] || live[k] {
			left++
			continue
		}
		if !d.nat.dnatOld[k] {
			stale[k] = true
			left++
			continue
		}
		if err := d.objs.NatDnatBe.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete dnat backend: %w", err)
		}
	}
	d.nat.dnatOld = stale
	if left == 0 && !anyDNAT && d.nat.cfg.Flags&wire.NATCfgDNAT != 0 {
		c := d.nat.cfg
		c.Flags &^= wire.NATCfgDNAT
		return d.writeNATCfg(c)
	}
	return nil
}

// dnatBackends is the set of backends the installed dnat services name,
// as nat_dnat_be holds them, and whether any dnat service is installed.
// Called with mu held.
func (d *Dataplane) dnatBackends() (map[wire.NATBackendKey]bool, bool) {
	out := map[wire.NATBackendKey]bool{}
	anyDNAT := false
	for _, s := range d.svcs.list() {
		if wire.Encap(s.Encap) != EncapDNAT {
			continue
		}
		anyDNAT = true
		for _, b := range d.backends.owner.backends(s.Id + 1) {
			ap := d.backends.addrs[b]
			port := wire.Port(ap.Port())
			if ap.Port() == 0 {
				port = s.Port
			}
			out[wire.NATBackendKey{Addr: wire.AddrOf(ap.Addr()), Port: port, Proto: s.Proto}] = true
		}
	}
	return out, anyDNAT
}

// EndBackendSessions ends the sessions of backend id at once (it failed
// its health check) and returns how many; a backend that merely leaves the
// configuration (drain) keeps its sessions until they end. Only sessions
// that went to the address and port id has now are ended: a session of a
// backend that left, whose id was given to another since, is not id's.
func (d *Dataplane) EndBackendSessions(id uint32) (int, error) {
	d.mu.Lock()
	ap, ok := d.backends.addrs[id]
	d.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("end sessions of backend %d: no such backend", id)
	}
	addr := wire.AddrOf(ap.Addr())
	d.nat.mu.Lock()
	defer d.nat.mu.Unlock()
	ended := 0
	for _, t := range d.sessionTables() {
		var mine []wire.SessionKey
		var vals []wire.Session
		err := walkSessions(t.rev, func(k *wire.SessionKey, v *wire.Session) {
			port := ap.Port()
			if port == 0 {
				port = wire.PortFrom(v.VipPort)
			}
			if v.BackendId == id && k.Src == addr && k.Sport == wire.Port(port) {
				mine = append(mine, *k)
				vals = append(vals, *v)
			}
		})
		if err != nil {
			return ended, err
		}
		for i := range mine {
			ok, err := removeSession(t.fwd, t.rev, &mine[i], &vals[i])
			if err != nil {
				return ended, err
			}
			if ok {
				ended++
			}
		}
	}
	return ended, d.addSwept(wire.LBNATEnded, uint64(ended))
}

// stateNames name the session states for Session.State.
var stateNames = map[uint8]string{
	wire.SessionSyn: "syn", wire.SessionEstablished: "established", wire.SessionClosing: "closing", wire.SessionUDP: "udp",
}

// Sessions lists up to max sessions of the service vip:port/proto (max
// <= 0: all of them), established ones first.
func (d *Dataplane) Sessions(vip netip.Addr, port uint16, proto uint8, max int) ([]Session, error) {
	want, wport := wire.AddrOf(vip.Unmap()), wire.Port(port)
	now := monotonicNow()
	var out []Session
	for i, t := range d.sessionTables() {
		err := walkSessions(t.rev, func(k *wire.SessionKey, v *wire.Session) {
			if max > 0 && len(out) >= max || v.Vip != want || v.VipPort != wport || k.Proto != proto {
				return
			}
			if i != embryonicTables {
				joinForward(t.fwd, k, v)
			}
			idle := time.Duration(0)
			if now > v.Last {
				idle = time.Duration(now - v.Last)
			}
			out = append(out, Session{
				Protocol:  k.Proto,
				Client:    netip.AddrPortFrom(v.Client.IP(), wire.PortFrom(v.ClientPort)),
				VIP:       netip.AddrPortFrom(v.Vip.IP(), wire.PortFrom(v.VipPort)),
				Backend:   netip.AddrPortFrom(k.Src.IP(), wire.PortFrom(k.Sport)),
				BackendID: v.BackendId,
				Source:    netip.AddrPortFrom(k.Dst.IP(), wire.PortFrom(k.Dport)),
				State:     stateNames[v.State],
				Replied:   v.Flags&wire.SessionReplied != 0,
				Idle:      idle,
			})
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
