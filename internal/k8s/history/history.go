// Package history keeps a daisy-chained Service's endpoint history in an
// annotation: the backend set of each of its ports as the xlb agents
// compute it, and the earlier sets with the times they ended. The leader
// controller writes it (Record) whenever the sets change; every agent,
// one started after the change included, reads it (Parse, Generations)
// as the `history` of the Service's ports, so that all of them compute
// the same daisy-chaining hints (docs/connection-survival.md).
//
// The annotation is JSON:
//
//	{"sets": {"80/TCP": ["10.244.1.2:8080", "10.244.1.3:8080/0"]},
//	 "history": [{"until": "2026-11-25T10:00:00Z", "sets": {"80/TCP": ["10.244.1.2:8080"]}}]}
//
// A backend is ADDRESS:PORT, with /WEIGHT when the weight is not 1 (a
// draining endpoint has weight 0); history is oldest first and holds at
// most config.MaxHistory sets. A port's IPv4 endpoints are under its
// PortKey (80/TCP), its IPv6 endpoints, those of a dual-stack or IPv6
// Service's IPv6 address, under its PortKey6 (80/TCP/IPv6) as
// [ADDRESS]:PORT: each address of a Service has its own table, and its
// own history.
package history

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// Sets are the backend sets of a Service's ports, by PortKey.
type Sets map[string][]config.Backend

// PortKey names a Service port's IPv4 endpoints in the annotation:
// 80/TCP.
func PortKey(port uint16, proto config.Protocol) string {
	return fmt.Sprintf("%d/%s", port, strings.ToUpper(string(proto)))
}

// ipv6Suffix ends the key of a port's IPv6 endpoints.
const ipv6Suffix = "/IPv6"

// PortKey6 names the IPv6 endpoints of a Service port: 80/TCP/IPv6.
func PortKey6(port uint16, proto config.Protocol) string {
	return PortKey(port, proto) + ipv6Suffix
}

// Generation is a Service's sets until a time.
type Generation struct {
	Until time.Time
	Sets  Sets
}

// History is the annotation's content.
type History struct {
	// Sets are the current sets, as of the last Record.
	Sets Sets
	// Past are the earlier sets, oldest first.
	Past []Generation
}

// Record returns h with current as its sets: when they differ from h's,
// h's sets become the newest past generation, ending at now (a second
// after the newest one at least, so that every generation ends at its
// own time, as config history wants), and the oldest go beyond
// config.MaxHistory. changed says whether the result differs from h. A
// zero h (no annotation yet) records no past.
func Record(h History, current Sets, now time.Time) (History, bool) {
	current = normalize(current)
	if h.Sets != nil && equalSets(h.Sets, current) {
		return h, false
	}
	out := History{Sets: current, Past: slices.Clone(h.Past)}
	if h.Sets != nil {
		until := now.UTC().Truncate(time.Second)
		if n := len(out.Past); n > 0 && !until.After(out.Past[n-1].Until) {
			until = out.Past[n-1].Until.Add(time.Second)
		}
		out.Past = append(out.Past, Generation{Until: until, Sets: h.Sets})
		if n := len(out.Past) - config.MaxHistory; n > 0 {
			out.Past = slices.Delete(out.Past, 0, n)
		}
	}
	return out, true
}

// normalize returns s with each set sorted by address and port, holding
// only what the annotation records of a backend.
func normalize(s Sets) Sets {
	out := make(Sets, len(s))
	for k, bs := range s {
		n := make([]config.Backend, 0, len(bs))
		for _, b := range bs {
			n = append(n, config.Backend{Address: b.Address, Port: b.Port, Weight: b.Weight})
		}
		sortBackends(n)
		out[k] = n
	}
	return out
}

func sortBackends(bs []config.Backend) {
	slices.SortFunc(bs, func(a, b config.Backend) int {
		return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port))
	})
}

func equalSets(a, b Sets) bool {
	return maps.EqualFunc(a, b, func(x, y []config.Backend) bool {
		return slices.EqualFunc(x, y, func(p, q config.Backend) bool {
			return p.Address == q.Address && p.Port == q.Port && p.Weight == q.Weight
		})
	})
}

// Generations returns the past sets of one port, oldest first, as a
// service's config history. A generation in which the port had no
// backend with a weight (it did not exist, had no endpoints, or only
// draining ones) owned no table slot, so it is left out, as the hints
// would skip it (chain.Hints) and as config history cannot hold it.
func (h History) Generations(portKey string) []config.Generation {
	var out []config.Generation
	for _, g := range h.Past {
		bs := g.Sets[portKey]
		if !slices.ContainsFunc(bs, func(b config.Backend) bool { return b.Weight > 0 }) {
			continue
		}
		out = append(out, config.Generation{Until: g.Until, Backends: slices.Clone(bs)})
	}
	return out
}

// wire is the JSON form.
type wire struct {
	Sets    map[string][]string `json:"sets"`
	History []wireGen           `json:"history,omitempty"`
}

type wireGen struct {
	Until string              `json:"until"`
	Sets  map[string][]string `json:"sets"`
}

// Format returns the annotation's value for h.
func Format(h History) string {
	w := wire{Sets: formatSets(h.Sets)}
	for _, g := range h.Past {
		w.History = append(w.History, wireGen{Until: g.Until.UTC().Format(time.RFC3339), Sets: formatSets(g.Sets)})
	}
	b, err := json.Marshal(w)
	if err != nil {
		panic(err) // maps and strings always marshal
	}
	return string(b)
}

func formatSets(s Sets) map[string][]string {
	out := make(map[string][]string, len(s))
	for k, bs := range s {
		l := make([]string, 0, len(bs))
		for _, b := range bs {
			e := netip.AddrPortFrom(b.Address, b.Port).String()
			if b.Weight != 1 {
				e += "/" + strconv.FormatUint(uint64(b.Weight), 10)
			}
			l = append(l, e)
		}
		out[k] = l
	}
	return out
}

// Parse reads an annotation's value. An error says what is wrong, for
// the Service's events; the agents then do without it.
func Parse(s string) (History, error) {
	var w wire
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return History{}, fmt.Errorf("not the JSON the controller writes: %w", err)
	}
	if w.Sets == nil {
		return History{}, fmt.Errorf(`no "sets"`)
	}
	var h History
	var err error
	if h.Sets, err = parseSets(w.Sets); err != nil {
		return History{}, fmt.Errorf("sets: %w", err)
	}
	if len(w.History) > config.MaxHistory {
		return History{}, fmt.Errorf("%d past sets, at most %d", len(w.History), config.MaxHistory)
	}
	for i, g := range w.History {
		t, err := time.Parse(time.RFC3339, g.Until)
		if err != nil {
			return History{}, fmt.Errorf("history[%d]: until %q is not an RFC 3339 time", i, g.Until)
		}
		if t.Unix() <= 0 || t.Unix() > 1<<32-1 {
			return History{}, fmt.Errorf("history[%d]: until %s is outside 1970-2106", i, g.Until)
		}
		if i > 0 && !t.After(h.Past[i-1].Until) {
			return History{}, fmt.Errorf("history[%d]: until %s is not after the one before", i, g.Until)
		}
		sets, err := parseSets(g.Sets)
		if err != nil {
			return History{}, fmt.Errorf("history[%d]: %w", i, err)
		}
		h.Past = append(h.Past, Generation{Until: t, Sets: sets})
	}
	return h, nil
}

func parseSets(w map[string][]string) (Sets, error) {
	out := make(Sets, len(w))
	for _, k := range slices.Sorted(maps.Keys(w)) {
		var bs []config.Backend
		for _, e := range w[k] {
			b, err := parseBackend(e, strings.HasSuffix(k, ipv6Suffix))
			if err != nil {
				return nil, fmt.Errorf("port %s: %w", k, err)
			}
			bs = append(bs, b)
		}
		sortBackends(bs)
		out[k] = bs
	}
	return out, nil
}

// parseBackend reads one backend of a port's IPv4 endpoints, or of its
// IPv6 ones (v6).
func parseBackend(e string, v6 bool) (config.Backend, error) {
	addr, weight, hasWeight := strings.Cut(e, "/")
	ap, err := netip.ParseAddrPort(addr)
	a := ap.Addr()
	if v6 {
		if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" || ap.Port() == 0 {
			return config.Backend{}, fmt.Errorf("backend %q: want [IPV6]:PORT or [IPV6]:PORT/WEIGHT (the key ends in %s: IPv6 endpoints)", e, ipv6Suffix)
		}
	} else if err != nil || !a.Is4() || ap.Port() == 0 {
		return config.Backend{}, fmt.Errorf("backend %q: want IPV4:PORT or IPV4:PORT/WEIGHT (IPv6 endpoints go under a key ending in %s)", e, ipv6Suffix)
	}
	b := config.Backend{Address: ap.Addr(), Port: ap.Port(), Weight: 1}
	if hasWeight {
		w, err := strconv.ParseUint(weight, 10, 32)
		if err != nil {
			return config.Backend{}, fmt.Errorf("backend %q: weight %q is not a number", e, weight)
		}
		if w > config.MaxWeight {
			return config.Backend{}, fmt.Errorf("backend %q: weight above %d", e, config.MaxWeight)
		}
		b.Weight = uint32(w)
	}
	return b, nil
}
