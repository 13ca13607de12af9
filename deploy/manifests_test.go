package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// object is one manifest document and where it came from, for messages.
type object struct {
	*unstructured.Unstructured
	from string // file:document
}

// key names an object as a cluster knows it: kind, namespace, name.
func (o object) key() string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// manifestFiles lists the YAML files of dir in the order
// `kubectl apply -f dir` applies them: lexical, no subdirectories.
func manifestFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	slices.Sort(files)
	return files, nil
}

// installFiles are the files of the documented install,
// `kubectl apply -f crds/ -f .`, in its order.
func installFiles() ([]string, error) {
	crds, err := manifestFiles("crds")
	if err != nil {
		return nil, err
	}
	if len(crds) == 0 {
		return nil, errors.New("deploy/crds has no manifests")
	}
	rest, err := manifestFiles(".")
	if err != nil {
		return nil, err
	}
	return append(crds, rest...), nil
}

// readObjects decodes every document of the files; documents holding
// only comments are skipped, as kubectl skips them.
func readObjects(files ...string) ([]object, error) {
	var objs []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		got, err := decodeObjects(f, data)
		if err != nil {
			return nil, err
		}
		objs = append(objs, got...)
	}
	return objs, nil
}

// decodeObjects splits a multi-document YAML stream and decodes each
// document; name prefixes the documents' origin.
func decodeObjects(name string, data []byte) ([]object, error) {
	var objs []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		from := fmt.Sprintf("%s:%d", name, i)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%s: a manifest needs apiVersion, kind and metadata.name", from)
		}
		objs = append(objs, object{u, from})
	}
}

func readYAML(path string, out any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// uncommentExamples returns 50-example.yaml with its examples commented
// in: every line from the first "# apiVersion:" on loses its "# ".
func uncommentExamples(data []byte) []byte {
	var out []string
	on := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "# apiVersion:") {
			on = true
		}
		if !on {
			continue
		}
		switch {
		case line == "#":
			line = ""
		case strings.HasPrefix(line, "# "):
			line = line[2:]
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}
