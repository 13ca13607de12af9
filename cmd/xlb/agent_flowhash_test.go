package main

import (
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Each flow hash the configuration accepts loads the program with that
// hash, and its name is the data plane's.
func TestFlowHashKind(t *testing.T) {
	for name, want := range map[string]wire.FlowHash{
		config.FlowHashFmix64:  wire.FlowHashFmix64,
		config.FlowHashLookup3: wire.FlowHashLookup3,
	} {
		if got := flowHashKind(name); got != want || got.String() != name {
			t.Errorf("flowHashKind(%q) = %v, want %v of the same name", name, got, want)
		}
	}
}

// The default is the data plane's zero value, which the LB program's
// flow_hash also starts as.
func TestDefaultFlowHash(t *testing.T) {
	if flowHashKind(config.DefaultFlowHash) != wire.FlowHash(0) {
		t.Errorf("the configuration's default flow hash %q is not the data plane's zero value", config.DefaultFlowHash)
	}
}
