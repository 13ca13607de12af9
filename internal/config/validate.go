package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// Validate checks c by the rules Parse applies to a file, as if c were
// written out by Marshal and read back, and returns what Parse would
// return then. name names c in the errors, which carry no line: there is
// no file. A source other than a file (Kubernetes) builds a Config and
// validates it, so that what it produces passes exactly the checks a file
// passes. It skips the YAML text both ways, which for thousands of
// backends costs ten times the checks themselves.
func Validate(name string, c *Config) (*Config, error) {
	return ValidateOn(name, c, nil)
}

// ValidateOn validates c as Validate does, for host h, as ParseOn parses
// a file for it. A nil h is Validate.
func ValidateOn(name string, c *Config, h *Host) (*Config, error) {
	top, nodes := toNode(reflect.ValueOf(render(c)))
	d := (&decoder{file: name, lineless: true, maxSteps: minSteps + stepsPerNode*nodes}).onHost(h)
	cfg := d.configFrom(top)
	if err := d.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// stepsPerNode bounds the decoder's work on a tree built by toNode, which
// has no aliases: it visits each node a few times at most.
const stepsPerNode = 4

// lineless drops the line references that messages make to other fields
// ("(line 12)", "(services[0].name, line 12)"): in a tree built by
// Validate every line is 0.
func lineless(msg string) string {
	msg = strings.ReplaceAll(msg, " (line 0)", "")
	return strings.ReplaceAll(msg, ", line 0", "")
}

// toNode builds the YAML node tree that marshalling v and parsing the
// text would give, for the kinds render's document uses: structs with
// yaml tags (omitempty honoured), pointers, slices, strings, integers and
// booleans. It also returns how many nodes it made.
func toNode(v reflect.Value) (*yaml.Node, int) {
	var b nodeBuilder
	n := b.node(v)
	return n, b.count
}

// nodeBuilder makes the nodes of one tree. A configuration from a
// cluster has tens of thousands of them: they are allocated in blocks,
// and each struct type's fields are read from its tags once.
type nodeBuilder struct {
	block []yaml.Node
	count int
}

func (b *nodeBuilder) new(kind yaml.Kind, tag, value string) *yaml.Node {
	if len(b.block) == 0 {
		b.block = make([]yaml.Node, 256)
	}
	n := &b.block[0]
	b.block = b.block[1:]
	n.Kind, n.Tag, n.Value = kind, tag, value
	b.count++
	return n
}

func (b *nodeBuilder) node(v reflect.Value) *yaml.Node {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return b.new(yaml.ScalarNode, "!!null", "null")
		}
		return b.node(v.Elem())
	case reflect.Struct:
		n := b.new(yaml.MappingNode, "!!map", "")
		fields := structFields(v.Type())
		n.Content = make([]*yaml.Node, 0, 2*len(fields))
		for _, sf := range fields {
			f := v.Field(sf.index)
			if sf.omitEmpty && (f.IsZero() || f.Kind() == reflect.Slice && f.Len() == 0) {
				continue
			}
			key := b.new(yaml.ScalarNode, "!!str", sf.name)
			n.Content = append(n.Content, key, b.node(f))
		}
		return n
	case reflect.Slice:
		n := b.new(yaml.SequenceNode, "!!seq", "")
		n.Content = make([]*yaml.Node, 0, v.Len())
		for i := range v.Len() {
			n.Content = append(n.Content, b.node(v.Index(i)))
		}
		return n
	case reflect.String:
		return b.new(yaml.ScalarNode, "!!str", v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return b.new(yaml.ScalarNode, "!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return b.new(yaml.ScalarNode, "!!int", strconv.FormatUint(v.Uint(), 10))
	case reflect.Bool:
		return b.new(yaml.ScalarNode, "!!bool", strconv.FormatBool(v.Bool()))
	}
	// render's document holds none of the other kinds.
	panic(fmt.Sprintf("config: toNode: unexpected %s", v.Type()))
}

// structField is a field of a struct of render's document, as its yaml
// tag names it.
type structField struct {
	index     int
	name      string
	omitEmpty bool
}

// fieldsOf caches structFields per type.
var fieldsOf sync.Map // reflect.Type -> []structField

func structFields(t reflect.Type) []structField {
	if fs, ok := fieldsOf.Load(t); ok {
		return fs.([]structField)
	}
	fs := make([]structField, t.NumField())
	for i := range fs {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		fs[i] = structField{index: i, name: name, omitEmpty: strings.Contains(opts, "omitempty")}
	}
	fieldsOf.Store(t, fs)
	return fs
}
