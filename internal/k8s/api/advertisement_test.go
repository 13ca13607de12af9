package api

import (
	"slices"
	"strings"
	"testing"
)

func TestParseCommunities(t *testing.T) {
	std, large, err := ParseCommunities("65000:100, 0:0,4294967295:0:1,,065000:01, No-Export,65535:65282")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"65000:100", "0:0", "65000:1", "no-export", "no-advertise"}; !slices.Equal(std, want) {
		t.Errorf("standard: %v, want %v", std, want)
	}
	if want := []string{"4294967295:0:1"}; !slices.Equal(large, want) {
		t.Errorf("large: %v, want %v", large, want)
	}
	for _, bad := range []string{"65536:1", "1", "1:2:3:4", "a:b", "1:4294967296:0", "no-such-name", "-1:2", "local-as"} {
		if _, _, err := ParseCommunities(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestCheckAdvertisement(t *testing.T) {
	l := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		spec BGPAdvertisementSpec
		want string // a prefix of the reason; "" for none
	}{
		{BGPAdvertisementSpec{}, ""},
		{BGPAdvertisementSpec{Communities: []string{"no-export", "BLACKHOLE"}}, ""},
		{BGPAdvertisementSpec{LargeCommunities: []string{"no-export"}}, "spec.largeCommunities[0]"},
		{BGPAdvertisementSpec{Communities: []string{"65000:100"}, LargeCommunities: []string{"1:2:3"}, AggregationLength: l(24), AggregateOnly: true}, ""},
		{BGPAdvertisementSpec{Communities: []string{"1:2:3"}}, "spec.communities[0]: \"1:2:3\" is not a community"},
		{BGPAdvertisementSpec{LargeCommunities: []string{"65000:100"}}, "spec.largeCommunities[0]"},
		{BGPAdvertisementSpec{AggregationLength: l(33)}, "spec.aggregationLength 33"},
		{BGPAdvertisementSpec{AggregationLengthV6: l(129)}, "spec.aggregationLengthV6 129"},
		{BGPAdvertisementSpec{AggregateOnly: true}, "spec.aggregateOnly needs"},
		{BGPAdvertisementSpec{PeerSelectors: []LabelSelector{{MatchExpressions: []LabelSelectorRequirement{{Key: "a", Operator: "In"}}}}}, "spec.peerSelectors[0]: "},
	} {
		got := CheckAdvertisement(tc.spec)
		if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v: %q, want %q…", tc.spec, got, tc.want)
		}
	}
}
