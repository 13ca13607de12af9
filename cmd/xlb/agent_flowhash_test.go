package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

func optionsFor(flowHash string) (wire.FlowHash, error) {
	cfg := &config.Config{Dataplane: config.Dataplane{FlowHash: flowHash}}
	opts, err := dataplaneOptions(cfg, netip.MustParseAddr("10.0.1.2"), netip.Addr{}, "/sys/fs/bpf/xlb/test")
	return opts.FlowHash, err
}

// The node's IPv6 address reaches the data plane as the outer source
// towards IPv6 backends.
func TestDataplaneNodeAddr6(t *testing.T) {
	cfg := &config.Config{Dataplane: config.Dataplane{FlowHash: config.DefaultFlowHash}}
	a4, a6 := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("fd00:1::2")
	opts, err := dataplaneOptions(cfg, a4, a6, "/sys/fs/bpf/xlb/test")
	if err != nil || opts.NodeAddr != a4 || opts.NodeAddr6 != a6 {
		t.Errorf("got %v, %v, %v; want %v, %v", opts.NodeAddr, opts.NodeAddr6, err, a4, a6)
	}
}

// Each flow hash the configuration accepts loads the program with that
// hash, and its name is the data plane's.
func TestFlowHashKind(t *testing.T) {
	for name, want := range map[string]wire.FlowHash{
		config.FlowHashFmix64:  wire.FlowHashFmix64,
		config.FlowHashLookup3: wire.FlowHashLookup3,
	} {
		if got, err := optionsFor(name); err != nil || got != want || got.String() != name {
			t.Errorf("flow hash %q: %v, %v; want %v of the same name", name, got, err, want)
		}
	}
}

// The default is the data plane's zero value, which the LB program's
// flow_hash also starts as.
func TestDefaultFlowHash(t *testing.T) {
	if got, err := optionsFor(config.DefaultFlowHash); err != nil || got != wire.FlowHash(0) {
		t.Errorf("the configuration's default flow hash %q is not the data plane's zero value: %v, %v", config.DefaultFlowHash, got, err)
	}
}

// A name the configuration does not know is an error, not the default: a
// node that guessed would hash otherwise than the others.
func TestFlowHashUnknownIsAnError(t *testing.T) {
	for _, name := range []string{"jhash", "", "Lookup3"} {
		if got, err := optionsFor(name); err == nil || !strings.Contains(err.Error(), "not a flow hash") {
			t.Errorf("flow hash %q: %v, %v; want an error", name, got, err)
		}
	}
}
