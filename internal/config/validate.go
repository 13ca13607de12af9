package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

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
	top, nodes := toNode(reflect.ValueOf(render(c)))
	d := &decoder{file: name, lineless: true, maxSteps: minSteps + stepsPerNode*nodes}
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
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, 1
		}
		return toNode(v.Elem())
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		count := 1
		t := v.Type()
		for i := range t.NumField() {
			name, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			f := v.Field(i)
			if strings.Contains(opts, "omitempty") && (f.IsZero() || f.Kind() == reflect.Slice && f.Len() == 0) {
				continue
			}
			val, c := toNode(f)
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, val)
			count += c + 1
		}
		return n, count
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		count := 1
		for i := range v.Len() {
			item, c := toNode(v.Index(i))
			n.Content = append(n.Content, item)
			count += c
		}
		return n, count
	case reflect.String:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v.String()}, 1
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v.Int(), 10)}, 1
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(v.Uint(), 10)}, 1
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}, 1
	}
	// render's document holds none of the other kinds.
	panic(fmt.Sprintf("config: toNode: unexpected %s", v.Type()))
}
