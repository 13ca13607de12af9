package config

import (
	"errors"
	"testing"
)

// Every name of every set parses to itself, and any other name is an
// error that says what was expected and what to write.
func TestNames(t *testing.T) {
	checkNames(t, ParseProtocol, []Protocol{TCP, UDP}, "TCP", `"TCP" is not a protocol; use tcp or udp (lower case)`)
	checkNames(t, ParseForwarding, []Forwarding{DSRIPIP, DSRGUE, NAT, DNAT}, "NAT", `"NAT" is not a forwarding mode; use dsr-ipip, dsr-gue, nat or dnat`)
	checkNames(t, ParseFlows, []Flows{FlowsStateless, FlowsDaisyChain, FlowsStateful}, "", `"" is not a flows mode; use stateless, daisy-chain or stateful`)
	checkNames(t, ParseCheckType, []CheckType{CheckTCP, CheckHTTP, CheckNone}, "HTTP",
		`"HTTP" is not a check type; use tcp (connect), http (GET with an expected status) or none (not probed), lower case`)
	checkNames(t, ParseAttachMode, []AttachMode{AttachAuto, AttachNative, AttachGeneric}, "offload",
		`"offload" is not an attach mode; use auto (native, falling back to generic), native or generic`)
}

func checkNames[T ~string](t *testing.T, parse func(string) (T, error), valid []T, bad, want string) {
	t.Helper()
	var list []string
	for _, v := range valid {
		if got, err := parse(string(v)); err != nil || got != v {
			t.Errorf("%q: %q, %v", v, got, err)
		}
		list = append(list, string(v))
	}
	got, err := parse(bad)
	var ne *NameError
	switch {
	case got != "" || !errors.As(err, &ne) || err.Error() != want:
		t.Errorf("%q: %q, %v; want the error %q", bad, got, err, want)
	case ne.Name != bad || ne.List() != orList(list):
		t.Errorf("%q: %+v, list %q", bad, ne, ne.List())
	}
}
