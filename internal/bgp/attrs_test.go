package bgp

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseCommunity(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    uint32
		wantErr string
	}{
		{in: "65000:100", want: 65000<<16 | 100},
		{in: "0:0", want: 0},
		{in: "65535:65535", want: 0xFFFFFFFF},
		{in: "no-export", want: 0xFFFFFF01},
		{in: "NO-EXPORT", want: 0xFFFFFF01},
		{in: "no-advertise", want: 0xFFFFFF02},
		{in: "no-export-subconfed", want: 0xFFFFFF03},
		{in: "local-as", want: 0xFFFFFF03},
		{in: "blackhole", want: 0xFFFF029A},
		{in: "graceful-shutdown", want: 0xFFFF0000},
		{in: "65536:1", wantErr: `"65536" is not a number from 0 to 65535`},
		{in: "1:65536", wantErr: `"65536" is not a number from 0 to 65535`},
		{in: "-1:1", wantErr: `"-1" is not a number`},
		{in: "65000", wantErr: "want ASN:VALUE"},
		{in: "65000:1:2", wantErr: "want ASN:VALUE"},
		{in: "", wantErr: "want ASN:VALUE"},
		{in: "no-exports", wantErr: "want ASN:VALUE"},
		{in: "a:b", wantErr: `"a" is not a number`},
		{in: " 1:2", wantErr: `" 1" is not a number`},
	} {
		got, err := ParseCommunity(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("ParseCommunity(%q) error = %v, want one naming the input and saying %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseCommunity(%q) = %#x, %v; want %#x", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatCommunityRoundTrip(t *testing.T) {
	for _, in := range []string{"65000:100", "0:0", "65535:65535", "no-export", "no-export-subconfed", "blackhole", "1:65281"} {
		c, err := ParseCommunity(in)
		if err != nil {
			t.Fatal(err)
		}
		out := FormatCommunity(c)
		back, err := ParseCommunity(out)
		if err != nil || back != c {
			t.Errorf("%q → %#x → %q → %#x, %v", in, c, out, back, err)
		}
	}
	if got := FormatCommunity(0xFFFFFF03); got != "no-export-subconfed" {
		t.Errorf("FormatCommunity(no-export-subconfed) = %q; the RFC name should win over FRR's alias", got)
	}
}

func TestParseLargeCommunity(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    LargeCommunity
		wantErr string
	}{
		{in: "65000:1:2", want: LargeCommunity{65000, 1, 2}},
		{in: "4294967295:4294967295:4294967295", want: LargeCommunity{0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}},
		{in: "4294967296:1:2", wantErr: `"4294967296" is not a number from 0 to 4294967295`},
		{in: "65000:1", wantErr: "want GLOBAL:LOCAL1:LOCAL2"},
		{in: "1:2:3:4", wantErr: "want GLOBAL:LOCAL1:LOCAL2"},
		{in: "1::3", wantErr: `"" is not a number`},
	} {
		got, err := ParseLargeCommunity(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseLargeCommunity(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || got.String() != tc.in {
			t.Errorf("ParseLargeCommunity(%q) = %v (%s), %v; want %v", tc.in, got, got, err, tc.want)
		}
	}
}

func TestAttributesValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a       Attributes
		wantErr string
	}{
		{name: "empty", a: Attributes{}},
		{name: "all", a: Attributes{Communities: []string{"1:2", "no-export"}, LargeCommunities: []string{"1:2:3"}, MED: u32(0), LocalPref: u32(100)}},
		{name: "bad community", a: Attributes{Communities: []string{"1:2", "1:2:3"}}, wantErr: `communities[1]: community "1:2:3"`},
		{name: "bad large", a: Attributes{LargeCommunities: []string{"x"}}, wantErr: `largeCommunities[0]: large community "x"`},
	} {
		err := tc.a.Validate()
		if tc.wantErr == "" && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: error = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

// Announce compares the canonical form to decide whether anything
// changed, so equivalent spellings must compare equal and real changes
// must not.
func TestAttributesCanonicalForm(t *testing.T) {
	base := Attributes{Communities: []string{"65000:1", "no-export"}, LargeCommunities: []string{"1:2:3", "0:0:1"}, MED: u32(5)}
	same := []Attributes{
		{Communities: []string{"no-export", "65000:1"}, LargeCommunities: []string{"0:0:1", "1:2:3"}, MED: u32(5)},
		{Communities: []string{"65000:1", "65535:65281", "65000:1"}, LargeCommunities: []string{"1:2:3", "0:0:1", "1:2:3"}, MED: u32(5)},
	}
	different := []Attributes{
		{Communities: []string{"65000:1"}, LargeCommunities: []string{"1:2:3", "0:0:1"}, MED: u32(5)},
		{Communities: []string{"65000:1", "no-export"}, LargeCommunities: []string{"1:2:3"}, MED: u32(5)},
		{Communities: []string{"65000:1", "no-export"}, LargeCommunities: []string{"1:2:3", "0:0:1"}, MED: u32(6)},
		{Communities: []string{"65000:1", "no-export"}, LargeCommunities: []string{"1:2:3", "0:0:1"}},
		{Communities: []string{"65000:1", "no-export"}, LargeCommunities: []string{"1:2:3", "0:0:1"}, MED: u32(5), LocalPref: u32(5)},
	}
	b, err := base.parse()
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range same {
		p, err := a.parse()
		if err != nil || !p.equal(b) {
			t.Errorf("same[%d] differs from base (%v)", i, err)
		}
	}
	for i, a := range different {
		p, err := a.parse()
		if err != nil || p.equal(b) {
			t.Errorf("different[%d] equals base (%v)", i, err)
		}
	}
	want := Attributes{Communities: []string{"65000:1", "no-export"}, LargeCommunities: []string{"0:0:1", "1:2:3"}, MED: u32(5)}
	if got := b.attributes(); !reflect.DeepEqual(got, want) {
		t.Errorf("attributes() = %+v, want %+v", got, want)
	}
	// The canonical form owns its numbers: changing the caller's MED
	// afterwards must not change what was announced.
	*base.MED = 99
	if *b.med != 5 {
		t.Error("parse kept a pointer to the caller's MED")
	}
}
