package bpfobj

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

// A struct of the same size with its members reordered is another layout.
func TestDescribeTypeSeesMemberOrder(t *testing.T) {
	u32 := &btf.Int{Name: "u32", Size: 4}
	u64 := &btf.Int{Name: "u64", Size: 8}
	a := &btf.Struct{Name: "v", Size: 16, Members: []btf.Member{{Name: "a", Type: u64, Offset: 0}, {Name: "b", Type: u32, Offset: 64}}}
	b := &btf.Struct{Name: "v", Size: 16, Members: []btf.Member{{Name: "b", Type: u32, Offset: 0}, {Name: "a", Type: u64, Offset: 64}}}
	if describeType(a, 0) == describeType(b, 0) {
		t.Fatalf("reordered struct described alike: %s", describeType(a, 0))
	}
	same := &btf.Typedef{Name: "alias", Type: a}
	if describeType(same, 0) != describeType(a, 0) {
		t.Errorf("a typedef changes the description: %s vs %s", describeType(same, 0), describeType(a, 0))
	}
}
