package health

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// Defaults for zero Check fields; they match the agent configuration's.
const (
	defaultInterval  = time.Second
	defaultTimeout   = time.Second // or the interval, if shorter
	defaultRise      = 2
	defaultFall      = 2
	defaultPath      = "/"
	defaultStatusMin = 200
	defaultStatusMax = 399
	// minInterval keeps a mistaken tiny interval from turning the
	// prober into a busy loop.
	minInterval = 10 * time.Millisecond
	// maxFirstDelay bounds the jitter of a new target's first probe: it
	// is probed "at once", yet a thousand targets added together are
	// spread over this window rather than dialled in one burst.
	maxFirstDelay = 100 * time.Millisecond
)

// entry is one target with its schedule and result.
type entry struct {
	key   string
	addr  netip.Addr
	raw   Check // as given to Set, to tell whether a later Set changes it
	spec  spec
	phase time.Duration // offset of the probe slots in the interval
	res   Result

	due   time.Time // when the next probe should start
	index int       // position in the heap; -1 when not in it (new, or a probe is in flight)
	set   uint64    // the Set that last listed it (Prober.sets)
}

// spec is what a probe needs, worked out once per Set rather than per probe.
type spec struct {
	check    Check  // with defaults applied
	hostPort string // addr:port to dial
	request  []byte // http: the whole request; shared, never written
	err      error  // a check that cannot run: every probe fails with it
}

func (p *Prober) newEntry(t Target, now time.Time) *entry {
	e := &entry{
		key:   t.Key,
		addr:  t.Addr,
		raw:   t.Check,
		spec:  newSpec(t.Addr, t.Check),
		index: -1,
		res:   Result{State: Unknown, Since: now},
	}
	c := e.spec.check
	if c.Type == config.CheckNone {
		e.res.State = Up
		return e
	}
	h := fnv.New64a()
	h.Write([]byte(t.Key))
	sum := h.Sum64()
	e.phase = time.Duration(sum % uint64(c.Interval))
	e.due = now.Add(time.Duration((sum >> 32) % uint64(min(c.Interval, maxFirstDelay))))
	return e
}

// newSpec applies the defaults to c and prepares its probe.
func newSpec(addr netip.Addr, c Check) spec {
	if c.Type == "" {
		c.Type = config.CheckNone
	}
	if c.Interval <= 0 {
		c.Interval = defaultInterval
	}
	c.Interval = max(c.Interval, minInterval)
	if c.Timeout <= 0 {
		c.Timeout = min(defaultTimeout, c.Interval)
	}
	if c.Rise <= 0 {
		c.Rise = defaultRise
	}
	if c.Fall <= 0 {
		c.Fall = defaultFall
	}
	s := spec{check: c}
	switch c.Type {
	case config.CheckNone:
		return s
	case config.CheckTCP, config.CheckHTTP:
	default:
		s.err = fmt.Errorf("unknown check type %q (want tcp, http or none)", c.Type)
		return s
	}
	if !addr.IsValid() {
		s.err = errors.New("no address to probe")
		return s
	}
	if c.Port == 0 {
		s.err = errors.New("check port is 0")
		return s
	}
	s.hostPort = netip.AddrPortFrom(addr, c.Port).String()
	if c.Type == config.CheckTCP {
		return s
	}

	if c.Path == "" {
		c.Path = defaultPath
	}
	if c.StatusMin == 0 {
		c.StatusMin = defaultStatusMin
	}
	if c.StatusMax == 0 {
		c.StatusMax = defaultStatusMax
	}
	s.check = c
	if c.StatusMin > c.StatusMax {
		s.err = fmt.Errorf("expected status range %d..%d is empty", c.StatusMin, c.StatusMax)
		return s
	}
	if c.Path[0] != '/' {
		s.err = fmt.Errorf("path %q does not start with /", c.Path)
		return s
	}
	for i := 0; i < len(c.Path); i++ {
		if b := c.Path[i]; b <= ' ' || b >= 0x7f {
			s.err = fmt.Errorf("path %q contains %q; percent-encode it", c.Path, rune(b))
			return s
		}
	}
	host := addr.String()
	if addr.Is6() && !addr.Is4In6() {
		host = "[" + host + "]"
	}
	// The Host is the bare address: the check asks for the backend
	// itself, not for a virtual host.
	s.request = fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: xlb-health\r\nAccept: */*\r\nConnection: close\r\n\r\n", c.Path, host)
	return s
}

// record applies one probe result to r and returns the state r had before.
// The first result decides Up or Down at once; after that it takes Fall
// failures in a row to go down and Rise successes in a row to come up.
func (r *Result) record(c Check, ok bool, errText string, latency time.Duration, now time.Time) State {
	prev := r.State
	r.LastCheck, r.LastLatency, r.LastError = now, latency, errText
	if ok {
		r.Successes, r.Failures = r.Successes+1, 0
	} else {
		r.Successes, r.Failures = 0, r.Failures+1
	}
	next := prev
	switch {
	case prev == Unknown && ok:
		next = Up
	case prev == Unknown:
		next = Down
	case prev == Up && r.Failures >= c.Fall:
		next = Down
	case prev == Down && r.Successes >= c.Rise:
		next = Up
	}
	if next != prev {
		r.State, r.Since = next, now
	}
	return prev
}

// Bounds of the number of probes in flight.
const (
	minInflight = 64
	maxInflight = 512
)

// busy is the share of its interval that e's probe may be in flight.
func (e *entry) busy() float64 {
	if c := e.spec.check; c.Type != config.CheckNone {
		return float64(c.Timeout) / float64(c.Interval)
	}
	return 0
}

// limitFor sizes the probe pool for targets whose busy shares add up to
// busy, for the worst case, where every target hangs until its timeout:
// then Σ Timeout/Interval probes are in flight at once, and a smaller pool
// would stretch every interval. Fast answers keep far fewer in flight, and
// the pool only grows to what is. Set keeps the sum as targets come and
// go (Prober.busy).
func limitFor(busy float64) int {
	return int(min(max(math.Ceil(busy), minInflight), maxInflight))
}
