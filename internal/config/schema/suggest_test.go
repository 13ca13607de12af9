package schema

import "testing"

func TestSuggest(t *testing.T) {
	known := []string{"address", "port", "weight"}
	tests := []struct{ in, want string }{
		{"adress", "address"},
		{"Address", "address"},
		{"weigth", "weight"},
		{"wieght", "weight"},
		{"prot", "port"},
		{"ports", "port"},
		{"host", ""},
		{"x", ""},
		{"addr", ""},
	}
	for _, tc := range tests {
		if got := suggest(tc.in, known); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in    string
		known []string
		want  string
	}{
		{"pin_path", Fields[Dataplane](), "pinPath"},
		{"community", Fields[Route](), "communities"},
		{"large_community", Fields[Route](), "largeCommunities"},
		{"peer", Fields[BGP](), "peers"},
		{"service", Fields[Document](), "services"},
		{"nodes", Fields[Document](), "node"},
		{"router_id", Fields[BGP](), "routerID"},
	} {
		if got := suggest(tc.in, tc.known); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
