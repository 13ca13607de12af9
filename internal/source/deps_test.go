package source

import (
	"os/exec"
	"strings"
	"testing"
)

// TestFlowIsOneWay: configuration flows from the sources to the agent,
// and from the agent to the data plane and the announcements, never
// back. The configuration model knows no source, agent, data plane or
// announcer; no source knows the agent, the data plane or the
// announcer; the announcer knows no source.
func TestFlowIsOneWay(t *testing.T) {
	const mod = "github.com/xlbproject/xlb/internal/"
	for pkg, forbidden := range map[string][]string{
		"config":        {"agent", "announce", "dataplane", "source", "k8s"},
		"source":        {"agent", "announce", "dataplane", "k8s"},
		"source/file":   {"agent", "announce", "dataplane", "k8s"},
		"k8s/source":    {"agent", "announce", "dataplane"},
		"announce":      {"agent", "source", "k8s", "dataplane"},
		"config/schema": {"config", "agent", "announce", "dataplane", "source", "k8s"},
	} {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(dep, mod)
			if !ok || rel == pkg {
				continue
			}
			for _, f := range forbidden {
				if rel == f || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s depends on %s", pkg, rel)
				}
			}
		}
	}
}
