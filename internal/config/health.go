package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// healthFields are the fields of a healthCheck mapping, in the order the
// documentation lists them.
var healthFields = []string{"type", "port", "path", "expectStatus", "interval", "timeout", "rise", "fall"}

// setting is one field of a healthCheck as written, with where it was
// written for messages about it.
type setting[T any] struct {
	v    T
	node *yaml.Node // the value
	path string     // the field path
}

// checkSpec is one healthCheck mapping as written: a service's, or a
// backend's that overrides it. A nil field was not written.
type checkSpec struct {
	path     string     // e.g. services[0].healthCheck
	key      *yaml.Node // the healthCheck key
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
	node     *yaml.Node
	path     string
	httpOnly bool
}

// set records a valid field other than type.
func set[T any](c *checkSpec, dst **setting[T], v T, node *yaml.Node, path string, httpOnly bool) {
	*dst = &setting[T]{v, node, path}
	c.written = append(c.written, written{node, path, httpOnly})
}

// healthCheck reads the healthCheck field f. A null or empty mapping
// sets nothing, like a missing one.
func (d *decoder) healthCheck(f field, path string) *checkSpec {
	c := &checkSpec{path: path, key: f.key}
	v := d.resolve(f.value)
	if v != nil && v.Kind != yaml.MappingNode && !isNull(v) {
		d.errorf(v, path, "expected a mapping such as {type: http, path: /, interval: 1s}, got %s", describe(v))
		c.bad = true
		return c
	}
	fs := d.mapping(f.value, path, healthFields)
	at := func(name string) string { return join(path, name) }
	if g, ok := fs["type"]; ok {
		if s, ok := d.str(g, at("type")); !ok {
			c.bad = true
		} else {
			switch t := CheckType(s); t {
			case CheckNone, CheckTCP, CheckHTTP:
				c.typ = &setting[CheckType]{t, g.value, at("type")}
			default:
				d.errorf(g.value, at("type"), "%q is not a check type; use tcp (connect), http (GET with an expected status) or none (not probed), lower case", s)
				c.bad = true
			}
		}
	}
	if g, ok := fs["port"]; ok {
		if n, ok := d.integer(g, at("port"), 1, 65535); ok {
			set(c, &c.port, uint16(n), g.value, at("port"), false)
		} else {
			c.bad = true
		}
	}
	if g, ok := fs["path"]; ok {
		if s, ok := d.str(g, at("path")); !ok {
			c.bad = true
		} else if why := checkURLPath(s); why != "" {
			d.errorf(g.value, at("path"), "%s", why)
			c.bad = true
		} else {
			set(c, &c.urlPath, s, g.value, at("path"), true)
		}
	}
	if g, ok := fs["expectStatus"]; ok {
		if r, ok := d.statusRange(g, at("expectStatus")); ok {
			set(c, &c.status, r, g.value, at("expectStatus"), true)
		} else {
			c.bad = true
		}
	}
	if g, ok := fs["interval"]; ok {
		if v, ok := d.duration(g, at("interval"), MinCheckInterval); ok {
			set(c, &c.interval, v, g.value, at("interval"), false)
		} else {
			c.bad = true
		}
	}
	if g, ok := fs["timeout"]; ok {
		if v, ok := d.duration(g, at("timeout"), 0); ok {
			set(c, &c.timeout, v, g.value, at("timeout"), false)
		} else {
			c.bad = true
		}
	}
	for _, rf := range []struct {
		name string
		dst  **setting[int]
	}{{"rise", &c.rise}, {"fall", &c.fall}} {
		if g, ok := fs[rf.name]; ok {
			if n, ok := d.integer(g, at(rf.name), 1, MaxRiseFall); ok {
				set(c, rf.dst, int(n), g.value, at(rf.name), false)
			} else {
				c.bad = true
			}
		}
	}
	return c
}

// resolveCheck merges a backend's healthCheck (nil without one) over its
// service's (nil without one), applies the defaults, and returns the
// backend's check. With report set it reports the problems that the
// innermost spec's own fields cause; the caller sets it once per spec, so
// that a service's mistake is reported once, not once per backend.
func (d *decoder) resolveCheck(svc, be *checkSpec, backendPort uint16, report bool) HealthCheck {
	inner := be
	if inner == nil {
		inner = svc
	}
	report = report && inner != nil && !be.invalid() && !svc.invalid()
	errsBefore := len(d.errs)
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
		d.checkApplies(inner, hc.Type, typ)
	}
	defer func() {
		if report && len(d.errs) > errsBefore {
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
			d.timeoutTooLong(inner, timeout, interval, hc.Interval)
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
func (d *decoder) checkApplies(c *checkSpec, t CheckType, typ *setting[CheckType]) {
	// from names where an inherited type was written.
	from := ""
	if typ != nil && typ.path != join(c.path, "type") {
		from = fmt.Sprintf(" (%s, line %d)", typ.path, typ.node.Line)
	}
	switch t {
	case CheckNone:
		if len(c.written) == 0 {
			return
		}
		if typ == nil {
			// One error for the mapping, not one per field: the type
			// is what is missing.
			d.missing(c.key, join(c.path, "type"), "required when other fields are given: add type: http or type: tcp (without a type nothing is probed)")
			return
		}
		for _, w := range c.written {
			d.errorf(w.node, w.path, "does not apply: type is none%s, so nothing is probed; remove it, or set type: tcp or type: http", from)
		}
	case CheckTCP:
		for _, w := range c.written {
			if w.httpOnly {
				d.errorf(w.node, w.path, "applies to http checks only, and this check's type is tcp%s; remove it, or set type: http", from)
			}
		}
	}
}

// timeoutTooLong reports a timeout longer than the interval at whichever
// of the two the spec c wrote itself (the timeout if both).
func (d *decoder) timeoutTooLong(c *checkSpec, timeout *setting[time.Duration], interval *setting[time.Duration], iv time.Duration) {
	const why = "a probe must end before the next one starts"
	switch {
	case timeout.path == join(c.path, "timeout"):
		if interval == nil {
			d.errorf(timeout.node, timeout.path, "%s is longer than the interval (default %s); %s: lower timeout or set a longer interval", timeout.v, iv, why)
		} else {
			d.errorf(timeout.node, timeout.path, "%s is longer than the interval %s (%s, line %d); %s: lower timeout or raise interval", timeout.v, iv, interval.path, interval.node.Line, why)
		}
	case interval != nil && interval.path == join(c.path, "interval"):
		d.errorf(interval.node, interval.path, "%s is shorter than the timeout %s (%s, line %d); %s: raise interval or set a shorter timeout here", iv, timeout.v, timeout.path, timeout.node.Line, why)
	}
}

// duration returns the value of a duration field above lo (inclusive;
// 0: above 0) and at most MaxCheckInterval.
func (d *decoder) duration(f field, path string, lo time.Duration) (time.Duration, bool) {
	t, v, ok := d.durationValue(f, path)
	if !ok {
		return 0, false
	}
	switch {
	case lo == 0 && t <= 0:
		d.errorf(v, path, "%s is not above 0", show(v.Value))
		return 0, false
	case t < lo:
		d.errorf(v, path, "%s is below the minimum %s", show(v.Value), lo)
		return 0, false
	case t > MaxCheckInterval:
		d.errorf(v, path, "%s is above the maximum %s", show(v.Value), MaxCheckInterval)
		return 0, false
	}
	return t, true
}

// durationValue returns the value of a duration field, a Go duration
// string such as 500ms or 2s, and its node for messages about its range.
// A bare 0 is accepted: without a unit it can only mean zero.
func (d *decoder) durationValue(f field, path string) (time.Duration, *yaml.Node, bool) {
	v := d.resolve(f.value)
	if v == nil {
		return 0, nil, false
	}
	if isNull(v) {
		d.errorf(f.key, path, "has no value; give one or remove the field")
		return 0, nil, false
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" && v.Value == "0" {
		return 0, v, true
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		if v.Kind == yaml.ScalarNode && (v.ShortTag() == "!!int" || v.ShortTag() == "!!float") {
			d.errorf(v, path, "expected a duration with a unit, got %s; write e.g. %sms or %ss", describe(v), v.Value, v.Value)
		} else {
			d.errorf(v, path, "expected a duration such as 500ms or 2s, got %s", describe(v))
		}
		return 0, nil, false
	}
	t, err := time.ParseDuration(v.Value)
	if err != nil {
		d.errorf(v, path, "%s is not a duration; write a number with a unit (ms, s, m), e.g. 500ms or 2s", show(v.Value))
		return 0, nil, false
	}
	return t, v, true
}

// statusRange returns the value of expectStatus: one HTTP status code
// (200, or "200") or an inclusive range ("200-399").
func (d *decoder) statusRange(f field, path string) ([2]int, bool) {
	v := d.resolve(f.value)
	if v == nil {
		return [2]int{}, false
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" {
		n, ok := d.integer(f, path, 100, 599)
		return [2]int{int(n), int(n)}, ok
	}
	s, ok := d.str(f, path)
	if !ok {
		return [2]int{}, false
	}
	const form = "write one status code (e.g. 200) or a range (e.g. \"200-399\")"
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	a, aok := statusCode(lo)
	b, bok := statusCode(hi)
	switch {
	case !aok || !bok:
		d.errorf(v, path, "%s is not an HTTP status code or range of them; %s, with codes in 100..599", show(s), form)
		return [2]int{}, false
	case a > b:
		d.errorf(v, path, "%s is an empty range; write the lower code first (%d-%d)", show(s), b, a)
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
		return fmt.Sprintf("%s does not start with /; write the path of the URL, e.g. /healthz", show(p))
	case len(p) > MaxCheckPath:
		return fmt.Sprintf("is %d bytes long; at most %d", len(p), MaxCheckPath)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f {
			return fmt.Sprintf("%s contains %q; a request path is printable ASCII without spaces: percent-encode the rest (e.g. %%20)", show(p), rune(c))
		}
	}
	return ""
}
