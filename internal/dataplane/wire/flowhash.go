package wire

import (
	"fmt"
	"strconv"
)

// FlowHash names a flow hash: enum xlb_flow_hash, the LB program's
// load-time parameter flow_hash, and the configuration's
// dataplane.flowHash. Every xlb instance of a cluster must compute the
// same one: ECMP hands a flow to any of them.
type FlowHash = wireXlbFlowHash

// The flow hashes.
const (
	// FlowHashFmix64 packs the 5-tuple into 64 bits and runs
	// MurmurHash3's finalizer over them: the default.
	FlowHashFmix64 FlowHash = wireXlbFlowHashXLB_FLOW_HASH_FMIX64
	// FlowHashLookup3 is the final mix of Bob Jenkins' lookup3: xlb's
	// flow hash before fmix64, kept for clusters that started with it.
	FlowHashLookup3 FlowHash = wireXlbFlowHashXLB_FLOW_HASH_LOOKUP3
)

// The flow hashes' names in the configuration, the only place they are
// spelt.
const (
	FlowHashFmix64Name  = "fmix64"
	FlowHashLookup3Name = "lookup3"
)

// flowHashNames are the names by hash.
var flowHashNames = map[FlowHash]string{FlowHashFmix64: FlowHashFmix64Name, FlowHashLookup3: FlowHashLookup3Name}

// String is the hash's name in the configuration.
func (k wireXlbFlowHash) String() string {
	if n, ok := flowHashNames[k]; ok {
		return n
	}
	return "flow hash " + strconv.FormatUint(uint64(k), 10)
}

// Known says whether this xlb computes k.
func (k wireXlbFlowHash) Known() bool {
	_, ok := flowHashNames[k]
	return ok
}

// ParseFlowHash is the flow hash of a name in the configuration. Any
// other name, "" included, is an error that says which there are: a node
// that guessed would hash otherwise than the others.
func ParseFlowHash(name string) (FlowHash, error) {
	for k, n := range flowHashNames {
		if n == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%q is not a flow hash; use %s (the default) or %s (what xlb hashed with before it had this setting), the same on every node",
		name, FlowHashFmix64Name, FlowHashLookup3Name)
}
