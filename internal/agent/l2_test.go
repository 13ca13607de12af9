package agent

import (
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/source"
	"github.com/xlbproject/xlb/internal/source/file"
)

// A reload that switches node.announce is refused whole: applied, it
// would withdraw every route at once and start no ARP until a restart.
func TestReloadRefusesAnnounceSwitch(t *testing.T) {
	bgp := parse(t, `node: {interface: eth0, address: 10.0.1.2}
bgp: {asn: 65001, peers: [{address: 10.0.1.1, asn: 65000}]}
services: [{name: web, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.3.2}]}]
`)
	l2 := parse(t, `node: {interface: eth0, address: 10.0.1.2, announce: l2}
l2: {nodes: [{name: a, address: 10.0.1.2}]}
services: [{name: web, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.3.2}]}]
`)
	a, _, _ := testAgent(t, bgp, nil)
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	err := a.Replace(source.Update{Config: l2, Source: file.Name, Trigger: "test"})
	if err == nil || !strings.Contains(err.Error(), "node.announce changed from bgp to l2") {
		t.Fatalf("reload to layer-2 mode: %v; want it refused", err)
	}
	st, serr := a.Status()
	if serr != nil {
		t.Fatal(serr)
	}
	if st.Config.Result != api.ResultError || st.Config.Generation != 1 || a.cfg != bgp {
		t.Errorf("after the refused reload: result %s, generation %d, running the new file %v; want an error and the first configuration",
			st.Config.Result, st.Config.Generation, a.cfg != bgp)
	}
	// What --check says of the same file.
	c := diffConfigs(bgp, l2)
	if !strings.Contains(strings.Join(c.Restart, "\n"), "node.announce: bgp → l2") || !strings.Contains(strings.Join(c.Restart, "\n"), "l2: the election's nodes and timers change when the agent restarts") {
		t.Errorf("check's restart list %q names neither node.announce nor l2", c.Restart)
	}
}
