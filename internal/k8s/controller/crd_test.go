package controller

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// crdDir is deploy/crds, from this package's directory.
var crdDir = filepath.Join("..", "..", "..", "deploy", "crds")

// readCRD returns a CRD file as a map.
func readCRD(t testing.TB, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return crd
}

// schemaOf returns the openAPIV3Schema of a CRD's only version.
func schemaOf(t testing.TB, crd map[string]any) map[string]any {
	t.Helper()
	versions := crd["spec"].(map[string]any)["versions"].([]any)
	if len(versions) != 1 {
		t.Fatalf("%d versions, want 1", len(versions))
	}
	v := versions[0].(map[string]any)
	if v["name"] != api.Version {
		t.Errorf("version %v, want %s", v["name"], api.Version)
	}
	return v["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
}

// The CRDs' schemas have exactly the fields of the Go types, with
// matching types, and require exactly the fields without omitempty: the
// agent and the controller read the resources into these types, and a
// field the schema lacked would be pruned silently.
func TestCRDsMatchTypes(t *testing.T) {
	for _, tt := range []struct {
		file, kind, plural string
		spec, status       reflect.Type
	}{
		{"xlb.io_addresspools.yaml", "AddressPool", api.AddressPoolResource.Resource,
			reflect.TypeFor[api.AddressPoolSpec](), reflect.TypeFor[api.AddressPoolStatus]()},
		{"xlb.io_bgppeers.yaml", "BGPPeer", api.BGPPeerResource.Resource,
			reflect.TypeFor[api.BGPPeerSpec](), reflect.TypeFor[api.BGPPeerStatus]()},
		{"xlb.io_denylists.yaml", "DenyList", api.DenyListResource.Resource,
			reflect.TypeFor[api.DenyListSpec](), reflect.TypeFor[api.DenyListStatus]()},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			crd := readCRD(t, tt.file)
			spec := crd["spec"].(map[string]any)
			names := spec["names"].(map[string]any)
			if spec["group"] != api.Group || spec["scope"] != "Cluster" || names["kind"] != tt.kind || names["plural"] != tt.plural {
				t.Errorf("group %v scope %v kind %v plural %v", spec["group"], spec["scope"], names["kind"], names["plural"])
			}
			if want := tt.plural + "." + api.Group; crd["metadata"].(map[string]any)["name"] != want {
				t.Errorf("name %v, want %s", crd["metadata"].(map[string]any)["name"], want)
			}
			top := schemaOf(t, crd)["properties"].(map[string]any)
			compare(t, "spec", top["spec"].(map[string]any), tt.spec, true)
			if tt.status != nil {
				compare(t, "status", top["status"].(map[string]any), tt.status, false)
			} else if _, ok := top["status"]; ok {
				t.Error("schema has a status the type lacks")
			}
		})
	}
}

// compare checks schema s against Go type typ at path. strict: fields
// without omitempty must be required.
func compare(t *testing.T, path string, s map[string]any, typ reflect.Type, strict bool) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := func(schemaType string) bool {
		if s["type"] != schemaType {
			t.Errorf("%s: schema type %v, Go type %s wants %s", path, s["type"], typ, schemaType)
			return false
		}
		return true
	}
	switch {
	case typ == reflect.TypeFor[metav1.Duration]():
		if want("string") && s["pattern"] == nil {
			t.Errorf("%s: a duration without a pattern", path)
		}
	case typ == reflect.TypeFor[metav1.Time]():
		if want("string") && s["format"] != "date-time" {
			t.Errorf("%s: a time without format date-time", path)
		}
	case typ.Kind() == reflect.Struct:
		if !want("object") {
			return
		}
		props, _ := s["properties"].(map[string]any)
		var required []string
		for _, r := range asSlice(s["required"]) {
			required = append(required, r.(string))
		}
		var fields []string
		for f := range typ.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || name == "" {
				continue
			}
			fields = append(fields, name)
			sub, ok := props[name].(map[string]any)
			if !ok {
				t.Errorf("%s.%s: in the Go type, not in the schema", path, name)
				continue
			}
			omit := strings.Contains(opts, "omitempty")
			if slices.Contains(required, name) && omit {
				t.Errorf("%s.%s: required in the schema, omitempty in Go", path, name)
			}
			if strict && !omit && !slices.Contains(required, name) {
				t.Errorf("%s.%s: not omitempty in Go, so the schema must require it", path, name)
			}
			compare(t, path+"."+name, sub, f.Type, strict)
		}
		for name := range props {
			if !slices.Contains(fields, name) {
				t.Errorf("%s.%s: in the schema, not in the Go type %s", path, name, typ)
			}
		}
	case typ.Kind() == reflect.Slice:
		if want("array") {
			compare(t, path+"[]", s["items"].(map[string]any), typ.Elem(), strict)
		}
	case typ.Kind() == reflect.Map:
		if want("object") {
			compare(t, path+"{}", s["additionalProperties"].(map[string]any), typ.Elem(), strict)
		}
	case typ.Kind() == reflect.String:
		want("string")
	case typ.Kind() == reflect.Bool:
		want("boolean")
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		if !want("integer") {
			return
		}
		lo, hi := intRange(typ)
		if min, ok := s["minimum"].(float64); (!ok && !math.IsInf(lo, -1)) || (ok && min < lo) {
			t.Errorf("%s: minimum %v, the Go type %s needs ≥ %v", path, s["minimum"], typ, lo)
		}
		if max, ok := s["maximum"].(float64); (!ok && hi < math.MaxInt64) || max > hi {
			t.Errorf("%s: maximum %v, the Go type %s needs ≤ %v", path, s["maximum"], typ, hi)
		}
	default:
		t.Errorf("%s: Go type %s not handled by the test", path, typ)
	}
}

func intRange(typ reflect.Type) (lo, hi float64) {
	bits := typ.Bits()
	if typ.Kind() >= reflect.Uint {
		return 0, math.Pow(2, float64(bits)) - 1
	}
	if bits == 64 {
		// The schema need not bound an int; the status counters are
		// int64 and unbounded.
		return math.Inf(-1), math.MaxInt64
	}
	return -math.Pow(2, float64(bits-1)), math.Pow(2, float64(bits-1)) - 1
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// The CRD files parse and say what the controller and docs say.
func TestCRDPrinterColumns(t *testing.T) {
	for _, file := range []string{"xlb.io_addresspools.yaml", "xlb.io_bgppeers.yaml", "xlb.io_denylists.yaml"} {
		crd := readCRD(t, file)
		v := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
		for _, c := range asSlice(v["additionalPrinterColumns"]) {
			col := c.(map[string]any)
			jp := col["jsonPath"].(string)
			if jp == ".metadata.creationTimestamp" {
				continue
			}
			// Every column points at a field of the schema.
			node := schemaOf(t, crd)
			for _, part := range strings.Split(strings.TrimPrefix(jp, "."), ".") {
				props, _ := node["properties"].(map[string]any)
				next, ok := props[part].(map[string]any)
				if !ok {
					t.Errorf("%s: column %v: %s has no field %q", file, col["name"], jp, part)
					break
				}
				node = next
			}
			if fmt.Sprint(node["type"]) != fmt.Sprint(col["type"]) && !(col["type"] == "string" && node["type"] == "array") {
				t.Errorf("%s: column %v has type %v, the field %v", file, col["name"], col["type"], node["type"])
			}
		}
	}
}
