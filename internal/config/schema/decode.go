package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

const (
	// minSteps and stepsPerByte bound the work spent resolving aliases
	// and merge keys, so that a small file full of nested aliases
	// ("billion laughs") is rejected instead of expanded. Written out
	// without aliases, every node takes at least two bytes of text, so
	// the budget grows with the file: a file with a million backends
	// still parses, a 100-byte alias bomb does not.
	minSteps     = 1 << 19
	stepsPerByte = 2
)

// Decode reads a configuration file into a Document. filename names the
// file in the errors. It reports every problem of shape it finds, not
// only the first; with any, the Document holds what could be read, its
// fields with bad values marked Bad. It returns no Document when there
// is nothing to check further: the file is empty or not YAML, its top
// is not a mapping, or its aliases expand beyond reason.
func Decode(filename string, data []byte) (*Document, *Errors) {
	d := &decoder{errs: Errors{File: filename}, maxSteps: minSteps + stepsPerByte*len(data)}
	doc := d.document(data)
	if d.exhausted {
		// What was read is half a document: checking it further would
		// only report what is missing from the half not read.
		doc = nil
	}
	return doc, &d.errs
}

// decoder walks a yaml.Node tree into a Document and collects every
// problem it finds instead of stopping at the first.
type decoder struct {
	errs Errors
	// path is the field path of the value being read, e.g.
	// services[1].backends[0]: built in place, made a string only for
	// an error.
	path      []byte
	reported  map[reported]bool
	misspelt  map[string]bool
	steps     int
	maxSteps  int
	exhausted bool
}

// reported identifies an unknown field already reported.
type reported struct {
	key  *yaml.Node
	path string
}

// errorf reports a problem at the value being read.
func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	d.errorAt(n, string(d.path), format, args...)
}

// errorAt reports a problem at n and path.
func (d *decoder) errorAt(n *yaml.Node, path, format string, args ...any) {
	if d.exhausted {
		// What follows the budget error comes from a half-read document.
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs.Add(line, path, format, args...)
}

// step accounts for one unit of work and reports whether the budget allows
// it. The budget error is reported once.
func (d *decoder) step() bool {
	if d.exhausted {
		return false
	}
	d.steps++
	if d.steps > d.maxSteps {
		d.errorAt(nil, "", "the document expands to too many nodes through aliases or merge keys; write the configuration out without them")
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
			d.errorAt(n, "", "alias *%s cannot be resolved", Show(n.Value))
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

// document parses data, a single YAML document, into a Document, or
// returns nil with the error recorded.
func (d *decoder) document(data []byte) (doc *Document) {
	// yaml.v3 is third-party code fed with untrusted input: a panic in it
	// must become an error, not a crashed agent.
	defer func() {
		if r := recover(); r != nil {
			d.errorAt(nil, "", "invalid YAML: the parser failed (%v)", r)
			doc = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorAt(nil, "", "the file is empty; it needs at least a node section with the interface, e.g. \"node: {interface: eth0}\"")
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
		d.errorAt(&next, "", "a second YAML document starts here (\"---\"); the configuration must be a single document")
		return nil
	}
	if emptyDocument(&root) {
		d.errorAt(nil, "", "the file holds no configuration; it needs at least a node section with the interface, e.g. \"node: {interface: eth0}\"")
		return nil
	}
	top := d.resolve(root.Content[0])
	if top == nil {
		return nil
	}
	if top.Kind != yaml.MappingNode {
		d.errorAt(top, "", "the top level must be a mapping of sections (node, api, dataplane, bgp, services, kubernetes), got %s", describe(top))
		return nil
	}
	doc = &Document{At: Pos{Key: Line(top.Line), Value: Line(top.Line), Node: Line(top.Line)}}
	d.fields(reflect.ValueOf(doc).Elem(), top)
	doc.Misspelt = d.misspelt
	return doc
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
	d.errs.Add(line, "", "%s", "invalid YAML: "+msg)
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

// pair is a key and its value; for a list item, the item twice.
type pair struct {
	key, value *yaml.Node
}

// decodable is a *Field of any type.
type decodable interface {
	decode(d *decoder, p pair)
}

// decode reads the value of p into f; d.path is its path.
func (f *Field[T]) decode(d *decoder, p pair) {
	f.Given = true
	f.At = Pos{Key: Line(p.key.Line), Value: Line(p.value.Line)}
	before := d.errs.Len()
	ok := false
	if n := d.resolve(p.value); n != nil {
		f.At.Node = Line(n.Line)
		switch v := any(&f.V).(type) {
		case *string:
			ok = d.str(p.key, n, v)
		case *Text:
			ok = d.text(p.key, n, v)
		case *Int:
			ok = d.integer(p.key, n, v)
		case *ASN:
			ok = d.asn(p.key, n, v)
		case *bool:
			ok = d.boolean(p.key, n, v)
		case *Duration:
			ok = d.duration(p.key, n, v)
		case *Status:
			ok = d.status(p.key, n, v)
		default:
			ok = d.compound(reflect.ValueOf(v).Elem(), n)
		}
	}
	if !ok {
		var zero T
		f.V, f.Bad = zero, true
	}
	f.Flawed = d.errs.Len() > before || f.Bad
}

// compound reads a mapping into the struct v (or a new one v points to),
// or a list into the slice v.
func (d *decoder) compound(v reflect.Value, n *yaml.Node) bool {
	switch v.Kind() {
	case reflect.Slice:
		return d.list(v, n)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		v = v.Elem()
	}
	info := infoOf(v.Type())
	if n.Kind != yaml.MappingNode && !(isNull(n) && info.nullOK) {
		d.errorf(n, info.expected, describe(n))
		return false
	}
	d.fields(v, n)
	return true
}

// fields reads the mapping n (null: an empty one) into the struct v.
func (d *decoder) fields(v reflect.Value, n *yaml.Node) {
	info := infoOf(v.Type())
	var buf [12]pair
	got := buf[:0]
	if len(info.names) > len(buf) {
		got = make([]pair, 0, len(info.names))
	}
	got = got[:len(info.names)]
	d.mapping(n, info.names, got)
	for i, p := range got {
		if p.key != nil {
			at := d.enter(info.names[i])
			v.Field(info.index[i]).Addr().Interface().(decodable).decode(d, p)
			d.path = d.path[:at]
		}
	}
}

// enter appends a field name to d.path and returns the length to cut it
// back to.
func (d *decoder) enter(name string) int {
	at := len(d.path)
	if at > 0 {
		d.path = append(d.path, '.')
	}
	d.path = append(d.path, name...)
	return at
}

// list reads the list n (null: an empty one) into the slice v, whose
// items are Fields.
func (d *decoder) list(v reflect.Value, n *yaml.Node) bool {
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "expected a list (lines starting with \"- \"), got %s", describe(n))
		return false
	}
	items := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	at := len(d.path)
	for i, item := range n.Content {
		if d.exhausted {
			break
		}
		d.path = strconv.AppendInt(append(d.path, '['), int64(i), 10)
		d.path = append(d.path, ']')
		items.Index(i).Addr().Interface().(decodable).decode(d, pair{item, item})
		d.path = d.path[:at]
	}
	v.Set(items)
	return true
}

// structInfo is what the yaml tags of a mapping's struct say.
type structInfo struct {
	names []string // the fields, in the documentation's order
	index []int    // their indexes in the struct
	// expected is the error for a value that is not a mapping (%s: what
	// it is); nullOK lets null stand for an empty mapping.
	expected string
	nullOK   bool
}

// shaped is implemented by the mappings whose errors say what they hold.
type shaped interface {
	expected() (format string, nullOK bool)
}

var infos sync.Map // reflect.Type -> *structInfo

func infoOf(t reflect.Type) *structInfo {
	if info, ok := infos.Load(t); ok {
		return info.(*structInfo)
	}
	info := &structInfo{expected: "expected a mapping (key: value lines), got %s", nullOK: true}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		info.names = append(info.names, name)
		info.index = append(info.index, i)
	}
	if s, ok := reflect.Zero(t).Interface().(shaped); ok {
		info.expected, info.nullOK = s.expected()
	}
	infos.Store(t, info)
	return info
}

// Fields names the fields of the mapping T, in the documentation's order.
func Fields[T any]() []string {
	return slices.Clone(infoOf(reflect.TypeFor[T]()).names)
}

// mapping checks that n is a mapping and finds the value of each field in
// known: got[i] is the pair of known[i], or zero when the field is not
// written. Merge keys ("<<: *anchor") are expanded with the explicit keys
// taking precedence, as YAML defines. Duplicate keys and keys not in
// known are reported. A null n is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, known []string, got []pair) {
	n = d.resolve(n)
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "expected a mapping (key: value lines), got %s", describe(n))
		return
	}
	explicit := map[string]int{} // key -> line of its first occurrence
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.step() {
			return
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		k = d.resolve(k)
		if k == nil {
			return
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "a field name must be a plain word, got %s", describe(k))
			continue
		}
		name := k.Value
		if first, dup := explicit[name]; dup {
			d.errorAt(k, join(string(d.path), name), "appears twice in the same mapping (first at line %d); keep one", first)
			continue
		}
		explicit[name] = k.Line
		at := slices.Index(known, name)
		if at < 0 {
			d.unknown(k, string(d.path), name, known)
			continue
		}
		got[at] = pair{key: k, value: v}
	}
	// Merged fields fill in only what the mapping does not set itself;
	// among several merged mappings the first one wins.
	for _, m := range merges {
		for _, src := range d.mergeSources(m) {
			merged := make([]pair, len(known))
			d.mapping(src, known, merged)
			for i, p := range merged {
				if p.key == nil {
					continue
				}
				if _, set := explicit[known[i]]; set {
					continue
				}
				explicit[known[i]] = p.key.Line
				got[i] = p
			}
		}
	}
}

// mergeSources returns the mappings named by the value of a merge key: one
// mapping or a list of them.
func (d *decoder) mergeSources(v *yaml.Node) []*yaml.Node {
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
				d.errorf(e, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(e))
				continue
			}
			out = append(out, e)
		}
		return out
	}
	d.errorf(v, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(v))
	return nil
}

// unknown reports a field that is not part of the schema, with the closest
// known name when there is one.
func (d *decoder) unknown(k *yaml.Node, path, name string, known []string) {
	at := join(path, Show(name))
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
		d.errorAt(k, at, "unknown field (did you mean %q?)", s)
		if d.misspelt == nil {
			d.misspelt = map[string]bool{}
		}
		d.misspelt[join(path, s)] = true
		return
	}
	d.errorAt(k, at, "unknown field; valid fields here: %s", strings.Join(known, ", "))
}

// noValue reports a field written without a value.
func (d *decoder) noValue(key *yaml.Node) bool {
	d.errorf(key, "has no value; give one or remove the field")
	return false
}

// str reads a string. Numbers and booleans are not strings: YAML would
// have turned them into something else.
func (d *decoder) str(key, v *yaml.Node, out *string) bool {
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str":
		*out = v.Value
		return true
	case isNull(v):
		return d.noValue(key)
	case v.Kind == yaml.ScalarNode && v.Tag != "" && v.Tag[0] == '!' && !strings.HasPrefix(v.Tag, "!!"):
		d.errorf(v, "expected a string, got a value with the custom tag %s", Show(v.Tag))
	case v.Kind == yaml.ScalarNode:
		d.errorf(v, "expected a string, got %s; quote it (%q) if you mean the text", describe(v), v.Value)
	default:
		d.errorf(v, "expected a string, got %s", describe(v))
	}
	return false
}

// text reads the text of any non-null scalar.
func (d *decoder) text(key, v *yaml.Node, out *Text) bool {
	switch {
	case isNull(v):
		return d.noValue(key)
	case v.Kind != yaml.ScalarNode:
		d.errorf(v, "expected a single value, got %s", describe(v))
		return false
	}
	*out = Text(v.Value)
	return true
}

// integer reads a whole number.
func (d *decoder) integer(key, v *yaml.Node, out *Int) bool {
	if isNull(v) {
		return d.noValue(key)
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		d.errorf(v, "expected a whole number, got %s", describe(v))
		return false
	}
	n, ok := plainDecimal(v.Value)
	if !ok {
		if err := v.Decode(&n); err != nil {
			*out = Int{Big: v.Value}
			return true
		}
	}
	*out = Int{N: n}
	return true
}

// asn reads an AS number: a whole number, not in asdot notation.
func (d *decoder) asn(key, v *yaml.Node, out *ASN) bool {
	if v.Kind == yaml.ScalarNode && (v.ShortTag() == "!!float" || v.ShortTag() == "!!str") {
		if n, ok := asdot(v.Value); ok {
			d.errorf(v, "%s is in asdot notation; write the ASN as one number: %d", v.Value, n)
			return false
		}
	}
	return d.integer(key, v, (*Int)(out))
}

// asdot parses the asdot notation of an ASN, "HIGH.LOW" (RFC 5396), so
// that the error can give the number to write instead.
func asdot(s string) (uint32, bool) {
	hi, lo, ok := strings.Cut(s, ".")
	if !ok {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 10, 16)
	l, err2 := strconv.ParseUint(lo, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return uint32(h<<16 | l), true
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

// boolean reads true or false.
func (d *decoder) boolean(key, v *yaml.Node, out *bool) bool {
	if isNull(v) {
		return d.noValue(key)
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
		d.errorf(v, "expected true or false, got %s", describe(v))
		return false
	}
	if err := v.Decode(out); err != nil {
		d.errorf(v, "expected true or false, got %s", describe(v))
		return false
	}
	return true
}

// duration reads a Go duration string such as 500ms or 2s. A bare 0 is
// accepted: without a unit it can only mean zero.
func (d *decoder) duration(key, v *yaml.Node, out *Duration) bool {
	if isNull(v) {
		return d.noValue(key)
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" && v.Value == "0" {
		*out = Duration{Text: v.Value}
		return true
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		if v.Kind == yaml.ScalarNode && (v.ShortTag() == "!!int" || v.ShortTag() == "!!float") {
			d.errorf(v, "expected a duration with a unit, got %s; write e.g. %sms or %ss", describe(v), v.Value, v.Value)
		} else {
			d.errorf(v, "expected a duration such as 500ms or 2s, got %s", describe(v))
		}
		return false
	}
	t, err := time.ParseDuration(v.Value)
	if err != nil {
		d.errorf(v, "%s is not a duration; write a number with a unit (ms, s, m), e.g. 500ms or 2s", Show(v.Value))
		return false
	}
	*out = Duration{D: t, Text: v.Value}
	return true
}

// status reads an HTTP status code (200) or a string, a code or a range
// of them ("200", "200-399"), which config checks.
func (d *decoder) status(key, v *yaml.Node, out *Status) bool {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" {
		out.IsCode = true
		return d.integer(key, v, &out.Code)
	}
	return d.str(key, v, &out.Text)
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
			return "the integer " + Show(n.Value)
		case "!!float":
			return "the number " + Show(n.Value)
		case "!!bool":
			return "the boolean " + Show(n.Value)
		case "!!binary":
			return "binary data"
		case "!!timestamp":
			return "the timestamp " + Show(n.Value)
		}
		return fmt.Sprintf("%q tagged %s", n.Value, Show(n.Tag))
	}
	return "an empty value"
}

// join appends a field name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
