package source

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// denied is the node's deny list from one build: the base's policy.deny
// and every DenyList's prefixes, each once, and what it came from, so
// that a build whose DenyLists are the very objects of the last one
// reuses it (informer objects are replaced, never changed in place).
type denied struct {
	base  []netip.Prefix
	lists []*unstructured.Unstructured
	deny  []netip.Prefix
	probs []problem
}

// denyLists sets d.cfg.Policy.Deny to the union of the base's deny list
// and the DenyLists', oldest list first. A list's entries that are no
// IPv4 or IPv6 CIDR in network form are left out with a problem (the others are
// enforced); a list that would take the node over
// config.MaxDenyPrefixes is left out whole, with a problem, so that the
// lists before it stay enforced.
func (t *translated) denyLists(st settings, c cluster, d *desired) []problem {
	base := st.base.Policy.Deny
	lists := slices.Clone(c.denyLists)
	slices.SortFunc(lists, func(a, b *unstructured.Unstructured) int {
		return cmp.Or(a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time), cmp.Compare(a.GetName(), b.GetName()))
	})
	if l := t.denied; l != nil && slices.Equal(l.base, base) && slices.Equal(l.lists, lists) {
		d.cfg.Policy.Deny = l.deny
		return l.probs
	}
	seen := make(map[netip.Prefix]bool, len(base))
	deny := slices.Clone(base)
	for _, p := range base {
		seen[p] = true
	}
	var probs []problem
	for _, u := range lists {
		obj := "DenyList " + u.GetName()
		var dl api.DenyList
		if err := api.FromUnstructured(u, &dl); err != nil {
			probs = append(probs, problem{obj, fmt.Sprintf("cannot be read: %v; its prefixes are not denied", err),
				"correct the DenyList as the error says (kubectl edit denylist " + u.GetName() + "); if it matches the schema, install the CustomResourceDefinitions of this xlb version (deploy/crds)"})
			continue
		}
		ok, bad := api.DenyPrefixes(dl.Spec)
		if len(bad) > 0 {
			probs = append(probs, problem{obj, fmt.Sprintf("spec.prefixes: %s; these are not denied, the list's other prefixes are", strings.Join(bad, "; ")),
				"correct or remove those entries (kubectl edit denylist " + u.GetName() + ")"})
		}
		var fresh []netip.Prefix
		for _, p := range ok {
			if !seen[p] {
				fresh = append(fresh, p)
			}
		}
		if len(deny)+len(fresh) > config.MaxDenyPrefixes {
			probs = append(probs, problem{obj, fmt.Sprintf("not denied: its %d prefixes would take the node's deny list over %d (config.MaxDenyPrefixes), which older lists and the file's policy.deny fill with %d",
				len(fresh), config.MaxDenyPrefixes, len(deny)),
				"aggregate neighbouring prefixes into shorter ones, or remove lists that are no longer needed; the newest lists are the ones left out"})
			continue
		}
		for _, p := range fresh {
			seen[p] = true
		}
		deny = append(deny, fresh...)
	}
	if len(deny) == 0 {
		deny = nil
	}
	t.denied = &denied{base: base, lists: lists, deny: deny, probs: probs}
	d.cfg.Policy.Deny = deny
	return probs
}
