package wire

import "github.com/xlbproject/xlb/internal/flowhash"

// FlowHash is enum xlb_flow_hash, defined with its names in package
// flowhash; TestFlowHashMatchesC ties the two.
type FlowHash = flowhash.Kind

// The flow hashes.
const (
	FlowHashFmix64  = flowhash.Fmix64
	FlowHashLookup3 = flowhash.Lookup3
)
