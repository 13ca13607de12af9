// Package flowhash names the flow hashes xlb can compute: the values of
// enum xlb_flow_hash (bpf/xlb_structs.h), which the LB program takes as
// its load-time parameter flow_hash, and their names in the
// configuration (dataplane.flowHash). Every xlb instance of a cluster
// must compute the same one: ECMP hands a flow to any of them. The
// package is a leaf, so the configuration and the data plane share one
// definition without one importing the other.
package flowhash

import (
	"fmt"
	"strconv"
)

// Kind is a flow hash.
type Kind uint32

// The flow hashes; internal/dataplane/wire's tests tie them to the C enum.
const (
	// Fmix64 packs the 5-tuple into 64 bits and runs MurmurHash3's
	// finalizer over them: the default.
	Fmix64 Kind = 0
	// Lookup3 is the final mix of Bob Jenkins' lookup3: xlb's flow hash
	// before fmix64, kept for clusters that started with it.
	Lookup3 Kind = 1
)

// The names in the configuration, the only place they are spelt.
const (
	Fmix64Name  = "fmix64"
	Lookup3Name = "lookup3"
)

var names = map[Kind]string{Fmix64: Fmix64Name, Lookup3: Lookup3Name}

// String is the hash's name in the configuration.
func (k Kind) String() string {
	if n, ok := names[k]; ok {
		return n
	}
	return "flow hash " + strconv.FormatUint(uint64(k), 10)
}

// Known says whether this xlb computes k.
func (k Kind) Known() bool {
	_, ok := names[k]
	return ok
}

// Parse is the flow hash of a name in the configuration. Any other name,
// "" included, is an error that says which there are: a node that
// guessed would hash otherwise than the others.
func Parse(name string) (Kind, error) {
	for k, n := range names {
		if n == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%q is not a flow hash; use %s (the default) or %s (what xlb hashed with before it had this setting), the same on every node",
		name, Fmix64Name, Lookup3Name)
}

// Mix64 is MurmurHash3's 64-bit finalizer (fmix64 in bpf/xlb_helpers.h):
// every input bit affects every output bit. The default flow hash runs
// it, and so do the Go hashes that must spread similar keys (Maglev's
// preference lists, layer-2 mode's owner of a VIP).
func Mix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
