package lb

import (
	"os"
	"strings"
	"testing"
)

// The size check on a restart reads the table size record alone: it
// needs no pinned table to open by ID (BPF_MAP_GET_FD_BY_ID, which takes
// CAP_SYS_ADMIN), so the agent runs without that capability.
func TestTableSizeRecord(t *testing.T) {
	requirePrivileges(t)
	pin := testPinPath(t)
	if err := os.MkdirAll(pin, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkPinnedTableSize(pin, 251); err != nil {
		t.Fatalf("nothing pinned: %v", err)
	}
	if err := writeTableSize(pin, 251); err != nil {
		t.Fatal(err)
	}
	if err := checkPinnedTableSize(pin, 251); err != nil {
		t.Errorf("the recorded size: %v", err)
	}
	err := checkPinnedTableSize(pin, 257)
	if err == nil || !strings.Contains(err.Error(), "Maglev tables of size 251 but the config asks for 257") {
		t.Errorf("another size with only the record pinned: %v, want a refusal naming both sizes", err)
	}
	// Written again, it replaces the old record.
	if err := writeTableSize(pin, 257); err != nil {
		t.Fatal(err)
	}
	if size, ok, err := pinnedTableSize(pin); err != nil || !ok || size != 257 {
		t.Errorf("record after rewriting: %d, %v, %v", size, ok, err)
	}
}
