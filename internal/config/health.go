package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// setting is one field of a healthCheck or of BGP timers as written,
// with where it was written for messages about it.
type setting[T any] struct {
	v    T
	line schema.Line // the value's
	path string      // the field path
}

// checkSpec is one healthCheck mapping as written: a service's, or a
// backend's that overrides it. A nil field was not written.
type checkSpec struct {
	path     string      // e.g. services[0].healthCheck
	keyLine  schema.Line // the healthCheck key's line
	typ      *setting[CheckType]
	port     *setting[uint16]
	urlPath  *setting[string]
	status   *setting[[2]int]
	interval *setting[time.Duration]
	timeout  *setting[time.Duration]
	rise     *setting[int]
	fall     *setting[int]
	// written lists the valid fields other than type.
	written []written
	// bad: a field was written with an invalid value (already reported);
	// checks across fields would only add confusing errors.
	bad bool
}

// written is a field of a healthCheck that was written.
type written struct {
	line     schema.Line
	path     string
	httpOnly bool
}

// set records a valid field other than type.
func set[T any](c *checkSpec, dst **setting[T], v T, line schema.Line, path string, httpOnly bool) {
	*dst = &setting[T]{v, line, path}
	c.written = append(c.written, written{line, path, httpOnly})
}

// checkSpec checks the healthCheck field f. A null or empty mapping
// sets nothing, like a missing one.
func (c *checker) checkSpec(f schema.Field[*schema.Check], path string) *checkSpec {
	cs := &checkSpec{path: path, keyLine: f.At.Key, bad: f.Bad}
	var v schema.Check
	if f.V != nil {
		v = *f.V
	}
	at := func(name string) string { return join(path, name) }
	if g := v.Type; g.Bad {
		cs.bad = true
	} else if g.Given {
		if t, err := ParseCheckType(g.V); err != nil {
			c.errorf(g.At.Value, at("type"), "%v", err)
			cs.bad = true
		} else {
			cs.typ = &setting[CheckType]{t, g.At.Value, at("type")}
		}
	}
	if g := v.Port; g.Given {
		if n, ok := c.integer(g, at("port"), 1, 65535); ok {
			set(cs, &cs.port, uint16(n), g.At.Value, at("port"), false)
		} else {
			cs.bad = true
		}
	}
	if g := v.Path; g.Bad {
		cs.bad = true
	} else if g.Given {
		if why := checkURLPath(g.V); why != "" {
			c.errorf(g.At.Value, at("path"), "%s", why)
			cs.bad = true
		} else {
			set(cs, &cs.urlPath, g.V, g.At.Value, at("path"), true)
		}
	}
	if g := v.ExpectStatus; g.Given {
		if r, ok := c.statusRange(g, at("expectStatus")); ok {
			set(cs, &cs.status, r, g.At.Value, at("expectStatus"), true)
		} else {
			cs.bad = true
		}
	}
	if g := v.Interval; g.Given {
		if d, ok := c.duration(g, at("interval"), MinCheckInterval); ok {
			set(cs, &cs.interval, d, g.At.Value, at("interval"), false)
		} else {
			cs.bad = true
		}
	}
	if g := v.Timeout; g.Given {
		if d, ok := c.duration(g, at("timeout"), 0); ok {
			set(cs, &cs.timeout, d, g.At.Value, at("timeout"), false)
		} else {
			cs.bad = true
		}
	}
	for _, rf := range []struct {
		name string
		f    schema.Field[schema.Int]
		dst  **setting[int]
	}{{"rise", v.Rise, &cs.rise}, {"fall", v.Fall, &cs.fall}} {
		if rf.f.Given {
			if n, ok := c.integer(rf.f, at(rf.name), 1, MaxRiseFall); ok {
				set(cs, rf.dst, int(n), rf.f.At.Value, at(rf.name), false)
			} else {
				cs.bad = true
			}
		}
	}
	return cs
}

// resolveCheck merges a backend's healthCheck (nil without one) over its
// service's (nil without one), applies the defaults, and returns the
// backend's check. With report set it reports the problems that the
// innermost spec's own fields cause; the caller sets it once per spec, so
// that a service's mistake is reported once, not once per backend.
func (c *checker) resolveCheck(svc, be *checkSpec, backendPort uint16, report bool) HealthCheck {
	inner := be
	if inner == nil {
		inner = svc
	}
	report = report && inner != nil && !be.invalid() && !svc.invalid()
	errsBefore := c.errs.Len()
	typ := innermost(func(c *checkSpec) *setting[CheckType] { return c.typ }, be, svc)
	port := innermost(func(c *checkSpec) *setting[uint16] { return c.port }, be, svc)
	urlPath := innermost(func(c *checkSpec) *setting[string] { return c.urlPath }, be, svc)
	status := innermost(func(c *checkSpec) *setting[[2]int] { return c.status }, be, svc)
	interval := innermost(func(c *checkSpec) *setting[time.Duration] { return c.interval }, be, svc)
	timeout := innermost(func(c *checkSpec) *setting[time.Duration] { return c.timeout }, be, svc)
	rise := innermost(func(c *checkSpec) *setting[int] { return c.rise }, be, svc)
	fall := innermost(func(c *checkSpec) *setting[int] { return c.fall }, be, svc)

	hc := HealthCheck{Type: CheckNone}
	if typ != nil {
		hc.Type = typ.v
	}
	if report {
		c.checkApplies(inner, hc.Type, typ)
	}
	defer func() {
		if report && c.errs.Len() > errsBefore {
			// The backends inherit this mistake: say it once.
			inner.bad = true
		}
	}()
	if hc.Type == CheckNone {
		return hc
	}

	hc.Port = backendPort
	if port != nil {
		hc.Port = port.v
	}
	hc.Interval = DefaultCheckInterval
	if interval != nil {
		hc.Interval = interval.v
	}
	hc.Timeout = min(DefaultCheckTimeout, hc.Interval)
	if timeout != nil {
		hc.Timeout = timeout.v
		if hc.Timeout > hc.Interval && report {
			c.timeoutTooLong(inner, timeout, interval, hc.Interval)
		}
	}
	hc.Rise, hc.Fall = DefaultRise, DefaultFall
	if rise != nil {
		hc.Rise = rise.v
	}
	if fall != nil {
		hc.Fall = fall.v
	}
	if hc.Type == CheckHTTP {
		hc.Path = DefaultCheckPath
		if urlPath != nil {
			hc.Path = urlPath.v
		}
		hc.StatusMin, hc.StatusMax = DefaultStatusMin, DefaultStatusMax
		if status != nil {
			hc.StatusMin, hc.StatusMax = status.v[0], status.v[1]
		}
	}
	return hc
}

// innermost returns the first of specs (nil ones skipped) that writes the
// field get reads, or nil.
func innermost[T any](get func(*checkSpec) *setting[T], specs ...*checkSpec) *setting[T] {
	for _, c := range specs {
		if c != nil {
			if v := get(c); v != nil {
				return v
			}
		}
	}
	return nil
}

// invalid reports whether c has a field with an invalid value; a nil c
// has none.
func (c *checkSpec) invalid() bool { return c != nil && c.bad }

// checkApplies reports the fields of c that the resolved type t does not
// use: everything but type for none, path and expectStatus for tcp.
// Fields inherited from the service are not reported: a backend that
// switches to tcp simply leaves the service's path unused.
func (c *checker) checkApplies(cs *checkSpec, t CheckType, typ *setting[CheckType]) {
	// from names where an inherited type was written.
	from := ""
	if typ != nil && typ.path != join(cs.path, "type") {
		from = " (" + withLine(typ.path, typ.line) + ")"
	}
	switch t {
	case CheckNone:
		if len(cs.written) == 0 {
			return
		}
		if typ == nil {
			// One error for the mapping, not one per field: the type
			// is what is missing.
			c.missing(cs.keyLine, join(cs.path, "type"), "required when other fields are given: add type: http or type: tcp (without a type nothing is probed)")
			return
		}
		for _, w := range cs.written {
			c.errorf(w.line, w.path, "does not apply: type is none%s, so nothing is probed; remove it, or set type: tcp or type: http", from)
		}
	case CheckTCP:
		for _, w := range cs.written {
			if w.httpOnly {
				c.errorf(w.line, w.path, "applies to http checks only, and this check's type is tcp%s; remove it, or set type: http", from)
			}
		}
	}
}

// timeoutTooLong reports a timeout longer than the interval at whichever
// of the two the spec c wrote itself (the timeout if both).
func (c *checker) timeoutTooLong(cs *checkSpec, timeout *setting[time.Duration], interval *setting[time.Duration], iv time.Duration) {
	const why = "a probe must end before the next one starts"
	switch {
	case timeout.path == join(cs.path, "timeout"):
		if interval == nil {
			c.errorf(timeout.line, timeout.path, "%s is longer than the interval (default %s); %s: lower timeout or set a longer interval", timeout.v, iv, why)
		} else {
			c.errorf(timeout.line, timeout.path, "%s is longer than the interval %s (%s); %s: lower timeout or raise interval", timeout.v, iv, withLine(interval.path, interval.line), why)
		}
	case interval != nil && interval.path == join(cs.path, "interval"):
		c.errorf(interval.line, interval.path, "%s is shorter than the timeout %s (%s); %s: raise interval or set a shorter timeout here", iv, timeout.v, withLine(timeout.path, timeout.line), why)
	}
}

// duration returns the value of a duration field above lo (inclusive;
// 0: above 0) and at most MaxCheckInterval.
func (c *checker) duration(f schema.Field[schema.Duration], path string, lo time.Duration) (time.Duration, bool) {
	if !valid(f) {
		return 0, false
	}
	t, text := f.V.D, schema.Show(f.V.String())
	switch {
	case lo == 0 && t <= 0:
		c.errorf(f.At.Node, path, "%s is not above 0", text)
		return 0, false
	case t < lo:
		c.errorf(f.At.Node, path, "%s is below the minimum %s", text, lo)
		return 0, false
	case t > MaxCheckInterval:
		c.errorf(f.At.Node, path, "%s is above the maximum %s", text, MaxCheckInterval)
		return 0, false
	}
	return t, true
}

// statusRange returns the value of expectStatus: one HTTP status code
// (200, or "200") or an inclusive range ("200-399").
func (c *checker) statusRange(f schema.Field[schema.Status], path string) ([2]int, bool) {
	if !valid(f) {
		return [2]int{}, false
	}
	if f.V.IsCode {
		n, ok := c.integer(schema.Field[schema.Int]{V: f.V.Code, Given: true, At: f.At}, path, 100, 599)
		return [2]int{int(n), int(n)}, ok
	}
	s := f.V.Text
	const form = "write one status code (e.g. 200) or a range (e.g. \"200-399\")"
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	a, aok := statusCode(lo)
	b, bok := statusCode(hi)
	switch {
	case !aok || !bok:
		c.errorf(f.At.Node, path, "%s is not an HTTP status code or range of them; %s, with codes in 100..599", schema.Show(s), form)
		return [2]int{}, false
	case a > b:
		c.errorf(f.At.Node, path, "%s is an empty range; write the lower code first (%d-%d)", schema.Show(s), b, a)
		return [2]int{}, false
	}
	return [2]int{a, b}, true
}

// statusCode parses a three-digit HTTP status code, 100..599.
func statusCode(s string) (int, bool) {
	if len(s) != 3 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 100 && n <= 599
}

// checkURLPath accepts what can follow GET in a request line as an
// origin-form target: starting with '/', printable ASCII without spaces.
func checkURLPath(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%s does not start with /; write the path of the URL, e.g. /healthz", schema.Show(p))
	case len(p) > MaxCheckPath:
		return fmt.Sprintf("is %d bytes long; at most %d", len(p), MaxCheckPath)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f {
			return fmt.Sprintf("%s contains %q; a request path is printable ASCII without spaces: percent-encode the rest (e.g. %%20)", schema.Show(p), rune(c))
		}
	}
	return ""
}
