package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is one problem in a configuration file, located by line and field
// path, e.g. "agent.yaml:14: services[1].backends[0].address: ...".
type Error struct {
	File string
	Line int    // 1-based; 0 when the problem has no single line
	Path string // field path, e.g. services[1].backends[0].address; "" for the whole file
	Msg  string // the reason and, where useful, what to do
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

const (
	// maxErrors bounds the report: after that many the user learns how
	// many more there are, not what they are.
	maxErrors = 50
	// minSteps and stepsPerByte bound the work spent resolving aliases
	// and merge keys, so that a small file full of nested aliases
	// ("billion laughs") is rejected instead of expanded. Written out
	// without aliases, every node takes at least two bytes of text, so
	// the budget grows with the file: a file with a million backends
	// still parses, a 100-byte alias bomb does not.
	minSteps     = 1 << 19
	stepsPerByte = 2
)

// decoder walks a yaml.Node tree and collects every problem it finds
// instead of stopping at the first.
type decoder struct {
	file      string
	errs      []*Error
	seen      map[Error]bool // a mapping merged in many places fails the same way in each
	reported  map[reported]bool
	suggested map[string]bool // paths offered as "did you mean"
	steps     int
	maxSteps  int
	exhausted bool
	// lineless: the nodes have no lines (Validate), so messages leave
	// out their references to lines.
	lineless bool

	// host is the machine the configuration is for (nil: unknown), and
	// hostAddrs its addresses with the interface holding each.
	host      *Host
	hostAddrs map[netip.Addr]string
	// nodeAddr is the node address (node.address, or the host's first
	// IPv4 of node.interface); invalid when neither is known.
	nodeAddr netip.Addr
	nodeFrom string // where nodeAddr comes from, for messages
	// placed lists every backend address with where it was written, for
	// the check against every service's VIP once all are known.
	placed []placedAddr
}

// placedAddr is a backend address and the node and path it was written at.
type placedAddr struct {
	addr netip.Addr
	node *yaml.Node
	path string
}

// onHost makes d check against h (nil: no host).
func (d *decoder) onHost(h *Host) *decoder {
	d.host, d.hostAddrs = h, h.holders()
	return d
}

// reported identifies an unknown field already reported.
type reported struct {
	key  *yaml.Node
	path string
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	if d.exhausted {
		// What follows the budget error comes from a half-read document.
		return
	}
	e := Error{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if d.lineless {
		e.Msg = lineless(e.Msg)
	}
	if n != nil {
		e.Line = n.Line
	}
	if d.seen[e] {
		return
	}
	if d.seen == nil {
		d.seen = map[Error]bool{}
	}
	d.seen[e] = true
	d.errs = append(d.errs, &e)
}

// err returns every collected error, sorted by line, joined one per line.
func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	errs := make([]error, 0, min(len(d.errs), maxErrors)+1)
	for i, e := range d.errs {
		if i == maxErrors {
			errs = append(errs, fmt.Errorf("%s: %d more errors not shown; fix the ones above first", d.file, len(d.errs)-maxErrors))
			break
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// step accounts for one unit of work and reports whether the budget allows
// it. The budget error is reported once.
func (d *decoder) step() bool {
	if d.exhausted {
		return false
	}
	d.steps++
	if d.steps > d.maxSteps {
		d.errorf(nil, "", "the document expands to too many nodes through aliases or merge keys; write the configuration out without them")
		d.exhausted = true
		return false
	}
	return true
}

// resolve follows an alias to the node it names. It returns nil once the
// work budget is spent.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if !d.step() {
			return nil
		}
		if i > 0 || n.Alias == nil {
			// The parser only lets aliases name anchored, non-alias nodes.
			d.errorf(n, "", "alias *%s cannot be resolved", show(n.Value))
			return nil
		}
		n = n.Alias
	}
	if n == nil || !d.step() {
		return nil
	}
	return n
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// document parses data into its single YAML document. It returns the
// document's top node, or nil with the error already recorded.
func (d *decoder) document(data []byte) (top *yaml.Node) {
	// yaml.v3 is third-party code fed with untrusted input: a panic in it
	// must become an error, not a crashed agent.
	defer func() {
		if r := recover(); r != nil {
			d.errorf(nil, "", "invalid YAML: the parser failed (%v)", r)
			top = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(nil, "", "the file is empty; it needs at least a node section with the interface, e.g. \"node: {interface: eth0}\"")
			return nil
		}
		d.yamlError(data, err)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.yamlError(data, err)
		return nil
	case !emptyDocument(&next):
		d.errorf(&next, "", "a second YAML document starts here (\"---\"); the configuration must be a single document")
		return nil
	}
	if emptyDocument(&doc) {
		d.errorf(nil, "", "the file holds no configuration; it needs at least a node section with the interface, e.g. \"node: {interface: eth0}\"")
		return nil
	}
	return doc.Content[0]
}

// emptyDocument reports whether doc is a document with nothing in it, as
// left by a lone "---" or "~".
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Anchor == ""
}

// parserProblems are the errors of yaml.v3's parser, as opposed to its
// scanner. yaml.v3 reports their line 0-based (the scanner's 1-based) and
// at the start of the enclosing block where it has one, not at the fault.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   false,
	"did not find expected <document start>": false,
	"did not find expected node content":     false,
	"found duplicate %YAML directive":        false,
	"found incompatible YAML document":       false,
	"found duplicate %TAG directive":         false,
	"found undefined tag handle":             true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
}

// yamlError turns a syntax error of the YAML parser into a located Error.
func (d *decoder) yamlError(data []byte, err error) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	if inBlock, ok := parserProblems[msg]; ok {
		line++
		if inBlock {
			msg += " (in the block that starts on this line; check the lines after it, their indentation and brackets)"
		}
	}
	if line > 0 && tabIndented(data, line) {
		msg += "; YAML indentation must use spaces, not tabs"
	}
	msg = strings.ReplaceAll(msg, "\n", " ")
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Msg: "invalid YAML: " + msg})
}

// tabIndented reports whether the 1-based line of data starts with a tab
// among its leading blanks.
func tabIndented(data []byte, line int) bool {
	lines := bytes.Split(data, []byte("\n"))
	if line > len(lines) {
		return false
	}
	l := lines[line-1]
	indent := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
	return bytes.IndexByte(indent, '\t') >= 0
}

// field is one key/value pair of a mapping.
type field struct {
	key, value *yaml.Node
}

// fields maps each key of a mapping to its pair.
type fields map[string]field

// mapping checks that n is a mapping and returns its fields. Merge keys ("<<: *anchor") are expanded with the explicit keys
// taking precedence, as YAML defines. Duplicate keys and keys not in known
// are reported; a key in known is returned even when its value is not
// valid, so the caller can say why. A null n is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, path string, known []string) fields {
	out := fields{}
	n = d.resolve(n)
	if n == nil || isNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping (key: value lines), got %s", describe(n))
		return out
	}
	explicit := map[string]int{} // key -> line of its first occurrence
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.step() {
			return out
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		k = d.resolve(k)
		if k == nil {
			return out
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "a field name must be a plain word, got %s", describe(k))
			continue
		}
		name := k.Value
		if first, dup := explicit[name]; dup {
			d.errorf(k, join(path, name), "appears twice in the same mapping (first at line %d); keep one", first)
			continue
		}
		explicit[name] = k.Line
		if !slices.Contains(known, name) {
			d.unknown(k, path, name, known)
			continue
		}
		out[name] = field{key: k, value: v}
	}
	// Merged fields fill in only what the mapping does not set itself;
	// among several merged mappings the first one wins.
	for _, m := range merges {
		for _, src := range d.mergeSources(m, path) {
			merged := d.mapping(src, path, known)
			for name, f := range merged {
				if _, set := explicit[name]; set {
					continue
				}
				explicit[name] = f.key.Line
				out[name] = f
			}
		}
	}
	return out
}

// mergeSources returns the mappings named by the value of a merge key: one
// mapping or a list of them.
func (d *decoder) mergeSources(v *yaml.Node, path string) []*yaml.Node {
	v = d.resolve(v)
	if v == nil {
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, e := range v.Content {
			e = d.resolve(e)
			if e == nil {
				return out
			}
			if e.Kind != yaml.MappingNode {
				d.errorf(e, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(e))
				continue
			}
			out = append(out, e)
		}
		return out
	}
	d.errorf(v, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(v))
	return nil
}

// unknown reports a field that is not part of the schema, with the closest
// known name when there is one.
func (d *decoder) unknown(k *yaml.Node, path, name string, known []string) {
	at := join(path, show(name))
	// A mapping merged in many places would be reported, and a suggestion
	// computed, once per place; the message is the same each time.
	r := reported{k, at}
	if d.reported[r] {
		return
	}
	if d.reported == nil {
		d.reported = map[reported]bool{}
	}
	d.reported[r] = true
	if s := suggest(name, known); s != "" {
		d.errorf(k, at, "unknown field (did you mean %q?)", s)
		if d.suggested == nil {
			d.suggested = map[string]bool{}
		}
		d.suggested[join(path, s)] = true
		return
	}
	d.errorf(k, at, "unknown field; valid fields here: %s", strings.Join(known, ", "))
}

// missing reports a required field that is absent, unless a misspelling
// of it has been reported already: one error says it all.
func (d *decoder) missing(n *yaml.Node, path, format string, args ...any) {
	if !d.suggested[path] {
		d.errorf(n, path, format, args...)
	}
}

// sequence checks that n is a list and returns its resolved elements.
// A null n is an empty list.
func (d *decoder) sequence(n *yaml.Node, path string) (items []*yaml.Node, ok bool) {
	n = d.resolve(n)
	if n == nil {
		return nil, false
	}
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list (lines starting with \"- \"), got %s", describe(n))
		return nil, false
	}
	return n.Content, true
}

// str returns the value of a string field. Numbers and booleans are not
// strings: YAML would have turned them into something else.
func (d *decoder) str(f field, path string) (string, bool) {
	v := d.resolve(f.value)
	if v == nil {
		return "", false
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		return v.Value, true
	}
	if isNull(v) {
		d.errorf(f.key, path, "has no value; give one or remove the field")
		return "", false
	}
	if v.Kind == yaml.ScalarNode && v.Tag != "" && v.Tag[0] == '!' && !strings.HasPrefix(v.Tag, "!!") {
		d.errorf(v, path, "expected a string, got a value with the custom tag %s", show(v.Tag))
		return "", false
	}
	if v.Kind == yaml.ScalarNode {
		d.errorf(v, path, "expected a string, got %s; quote it (%q) if you mean the text", describe(v), v.Value)
		return "", false
	}
	d.errorf(v, path, "expected a string, got %s", describe(v))
	return "", false
}

// text returns the text of any non-null scalar: for values such as
// addresses the check of their content says more than "expected a
// string" would (10.0 is a YAML number, and not an IPv4 address).
func (d *decoder) text(f field, path string) (string, bool) {
	v := d.resolve(f.value)
	if v == nil {
		return "", false
	}
	switch {
	case isNull(v):
		d.errorf(f.key, path, "has no value; give one or remove the field")
		return "", false
	case v.Kind != yaml.ScalarNode:
		d.errorf(v, path, "expected a single value, got %s", describe(v))
		return "", false
	}
	return v.Value, true
}

// integer returns the value of an integer field within [lo, hi].
func (d *decoder) integer(f field, path string, lo, hi int64) (int64, bool) {
	v := d.resolve(f.value)
	if v == nil {
		return 0, false
	}
	if isNull(v) {
		d.errorf(f.key, path, "has no value; give one or remove the field")
		return 0, false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		d.errorf(v, path, "expected a whole number, got %s", describe(v))
		return 0, false
	}
	n, ok := plainDecimal(v.Value)
	if !ok {
		if err := v.Decode(&n); err != nil {
			d.errorf(v, path, "%s is out of range %d..%d", show(v.Value), lo, hi)
			return 0, false
		}
	}
	if n < lo || n > hi {
		d.errorf(v, path, "%d is out of range %d..%d", n, lo, hi)
		return 0, false
	}
	return n, true
}

// plainDecimal reads a decimal integer without sign, leading zero or
// other YAML notation, as almost every number in a configuration is;
// yaml.v3's Decode, which reads the others, costs far more per call.
func plainDecimal(s string) (int64, bool) {
	if s == "" || len(s) > 18 || s[0] == '0' && len(s) > 1 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names the YAML kind of n for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing (null)"
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the integer " + show(n.Value)
		case "!!float":
			return "the number " + show(n.Value)
		case "!!bool":
			return "the boolean " + show(n.Value)
		case "!!binary":
			return "binary data"
		case "!!timestamp":
			return "the timestamp " + show(n.Value)
		}
		return fmt.Sprintf("%q tagged %s", n.Value, show(n.Tag))
	}
	return "an empty value"
}

// show returns s as it is when it is a plain word, or else quoted: every
// error stays on one line whatever the input holds.
func show(s string) string {
	for _, r := range s {
		if r <= ' ' || r > '~' || r == '"' || r == '\\' {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// join appends a field name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// index appends a list index to a path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

var separators = strings.NewReplacer("_", "", "-", "")

// suggest returns the known name closest to a misspelt one, or "" when
// none is close: same letters ignoring case, '_' and '-' (table_size,
// TableSize), the singular for a plural or the other way round
// (community, communities), or at most two edits away for longer names.
func suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ToLower(separators.Replace(s)) }
	for _, k := range known {
		if norm(k) == norm(name) {
			return k
		}
	}
	for _, k := range known {
		if singular(norm(k)) == singular(norm(name)) {
			return k
		}
	}
	best, bestDist := "", 0
	for _, k := range known {
		limit := 1
		if len(k) >= 6 {
			limit = 2
		}
		dist := editDistance(strings.ToLower(name), strings.ToLower(k))
		if dist <= limit && (best == "" || dist < bestDist) {
			best, bestDist = k, dist
		}
	}
	return best
}

// singular strips an English plural ending: communities, peers.
func singular(s string) string {
	if stem, ok := strings.CutSuffix(s, "ies"); ok {
		return stem + "y"
	}
	return strings.TrimSuffix(s, "s")
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent bytes each cost
// one, so "weigth" is one edit from "weight".
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// Field names are short; anything this long is no typo of one.
		return max(len(a), len(b))
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
