package deploy

import (
	"context"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// command is one xlb command line the manifests run: a container's args,
// or an exec probe's command.
type command struct {
	from string // object and container
	args []string
}

// commands collects the xlb command lines of every pod template in objs.
func commands(objs []object) []command {
	var out []command
	for _, o := range objs {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			c, _ := c.(map[string]any)
			name, _ := c["name"].(string)
			from := o.from + " " + o.key() + " container " + name
			if args := stringList(c["args"]); len(args) > 0 {
				out = append(out, command{from + " args", args})
			}
			for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
				cmd, _, _ := unstructured.NestedStringSlice(c, probe, "exec", "command")
				if len(cmd) > 1 && cmd[0] == "/xlb" {
					out = append(out, command{from + " " + probe, cmd[1:]})
				}
			}
		}
	}
	return out
}

// stringList returns the strings of a decoded YAML list.
func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

var flagLine = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)

// Every subcommand and flag the manifests pass exists in the xlb binary
// built from this tree: a renamed flag would otherwise surface only as a
// crash-looping pod.
func TestManifestFlagsExist(t *testing.T) {
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := readObjects(files...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	// Values that switch on the optional flags.
	rendered, err := c.render(release{Name: "xlb", Namespace: "xlb-system"}, map[string]any{
		"agent": map[string]any{"interface": "eth1", "nat": map[string]any{"address": "10.0.0.12", "ports": "40000-49999", "sessions": 4096,
			"timeouts": map[string]any{"tcpSyn": "3s"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cmds := commands(append(objs, rendered...))
	if len(cmds) < 4 {
		t.Fatalf("found only %d xlb command lines in the manifests", len(cmds))
	}
	bin, cleanup, err := testenv.BuildXLB()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()

	known := map[string][]string{} // subcommand → its flags
	for _, cmd := range cmds {
		sub := cmd.args[0]
		flags, ok := known[sub]
		if !ok {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			// -h prints the flags; the exit status does not matter.
			out, _ := exec.CommandContext(ctx, bin, sub, "-h").CombinedOutput()
			cancel()
			for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
				flags = append(flags, m[1])
			}
			if len(flags) == 0 {
				t.Errorf("%s: `xlb %s -h` lists no flags; is %q a subcommand?\n%s", cmd.from, sub, sub, out)
			}
			known[sub] = flags
		}
		for _, a := range cmd.args[1:] {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !slices.Contains(flags, name) {
				t.Errorf("%s: `xlb %s` has no flag --%s (it has %v)", cmd.from, sub, name, flags)
			}
		}
	}
}
