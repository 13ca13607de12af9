package dataplane

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

// enumNames reads the members of a C enum from a source file.
func enumNames(t *testing.T, file, enum, prefix, last string) []string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)enum ` + enum + ` \{(.*?)\};`).FindSubmatch(src)
	if body == nil {
		t.Fatalf("enum %s not found in %s", enum, file)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*`+prefix+`([A-Z0-9_]+)`).FindAllSubmatch(body[1], -1) {
		if n := string(m[1]); n != last {
			names = append(names, strings.ToLower(n))
		}
	}
	return names
}

func TestReasonNamesMatchC(t *testing.T) {
	got := enumNames(t, "../../bpf/xlb_structs.h", "xlb_reason", "XLB_", "REASON_MAX")
	if strings.Join(got, ",") != strings.Join(ReasonNames, ",") {
		t.Fatalf("ReasonNames out of step with enum xlb_reason:\n C: %v\nGo: %v", got, ReasonNames)
	}
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps["reasons"].MaxEntries; int(n) != len(ReasonNames) {
		t.Fatalf("reasons map has %d entries, Go names %d", n, len(ReasonNames))
	}
}

func TestDecapNamesMatchC(t *testing.T) {
	got := enumNames(t, "../../bpf/xlb_structs.h", "decap_stat", "", "DECAP_STAT_MAX")
	want := []string{"decap_ipip", "decap_gue", "decap_pass", "decap_drop_inner", "decap_drop_gue"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("enum decap_stat changed: %v; update DecapStatNames (%v) and this test", got, DecapStatNames)
	}
	if len(DecapStatNames) != len(got) {
		t.Fatalf("DecapStatNames has %d names, enum %d", len(DecapStatNames), len(got))
	}
}

func TestLimitsMatchC(t *testing.T) {
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps["svc_index"].MaxEntries; n != SvcSlots || SvcSlots < 4*MaxServices {
		t.Errorf("svc_index map %d entries, SvcSlots %d, MaxServices %d", n, SvcSlots, MaxServices)
	}
	if n := spec.Maps["backends"].MaxEntries; n != DefaultMaxBackends {
		t.Errorf("backends map %d entries, DefaultMaxBackends %d", n, DefaultMaxBackends)
	}
	if n := spec.Maps["conntrack"].MaxEntries; n != DefaultConntrackSize {
		t.Errorf("conntrack map %d entries, DefaultConntrackSize %d", n, DefaultConntrackSize)
	}
	if n := spec.Maps["chain_tables"].MaxEntries; n != MaxServices {
		t.Errorf("chain_tables map %d entries, MaxServices %d", n, MaxServices)
	}
	for _, name := range []string{"maglev_tables", "svc_retired", "vips"} {
		if n := spec.Maps[name].MaxEntries; n != MaxServices {
			t.Errorf("%s map %d entries, MaxServices %d", name, n, MaxServices)
		}
	}
	if n := spec.Maps["vip_filter"].MaxEntries; n != vipFilterWords {
		t.Errorf("vip_filter map %d entries, vipFilterWords %d", n, vipFilterWords)
	}
	if config.MaxServices != MaxServices {
		t.Errorf("config.MaxServices %d, dataplane.MaxServices %d", config.MaxServices, MaxServices)
	}
}
