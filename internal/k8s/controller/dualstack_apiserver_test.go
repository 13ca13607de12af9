package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// withFamilies gives a Service its spec.ipFamilyPolicy and ipFamilies.
func withFamilies(policy corev1.IPFamilyPolicy, fams ...corev1.IPFamily) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &policy
		s.Spec.IPFamilies = fams
	}
}

// TestAPIServerDualStack runs the controller against a dual-stack
// kube-apiserver: IPv6 and dual-stack AddressPools, and Services of
// every ipFamilyPolicy get an address of each family they ask for, in
// their status in the order of spec.ipFamilies; a RequireDualStack
// Service without an IPv6 pool gets a precise Event and no address of
// either family until it can have both.
func TestAPIServerDualStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane; skipped with -short")
	}
	cp := k8stest.StartT(t, k8stest.Options{ServiceCIDR: "10.96.0.0/16,fd00:96::/108"})
	e := &apiEnv{t: t}
	var err error
	if e.client, e.dyn, err = cp.Clients(100, 200); err != nil {
		t.Fatal(err)
	}
	e.applyCRDs()
	e.createNamespace("ds")
	e.startInstance("a")
	only := map[string]any{"namespaces": []any{"ds"}}

	e.createPool(t, "ds-v4", map[string]any{"addresses": []any{"10.100.9.0/30"}, "serviceAllocation": only})
	e.waitPoolFamily(t, "ds-v4", "IPv4")

	// RequireDualStack without an IPv6 pool: no address of either
	// family, and an Event saying why and what to do.
	e.createService(t, lbService("ds", "req", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)))
	e.waitEvent(t, "ds", "req", EventAllocationFailed, "spec.ipFamilyPolicy is RequireDualStack, and the Service can have no IPv6 address",
		"no auto-assign address pool has IPv6 addresses", "no new address of either family until it can have both")
	// PreferDualStack takes what it can meanwhile: IPv4, with the Event.
	e.createService(t, lbService("ds", "prefer", withFamilies(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)))
	e.waitIngress(t, "ds", "prefer", "10.100.9.0")
	e.waitEvent(t, "ds", "prefer", EventAllocationFailed, "no auto-assign address pool has IPv6 addresses")
	if in := ingressOf(e.get(t, "ds", "req")); in != "" {
		t.Errorf("a RequireDualStack Service without an IPv6 pool got %q, want nothing", in)
	}

	// An IPv6 pool: both get their IPv6 address; the status lists the
	// addresses in the order of spec.ipFamilies.
	e.createPool(t, "ds-v6", map[string]any{"addresses": []any{"2001:db8:99::/126", "2001:db8:99::10-2001:db8:99::11"}, "serviceAllocation": only})
	e.waitPoolFamily(t, "ds-v6", "IPv6")
	e.waitIngress(t, "ds", "req", "10.100.9.1,2001:db8:99::1")
	e.waitIngress(t, "ds", "prefer", "2001:db8:99::,10.100.9.0")
	e.waitEvent(t, "ds", "req", EventAllocated, "allocated 2001:db8:99::1 from address pool \"ds-v6\"")

	// SingleStack IPv6.
	e.createService(t, lbService("ds", "six", withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)))
	e.waitIngress(t, "ds", "six", "2001:db8:99::2")

	// A requested address of each family.
	e.createService(t, lbService("ds", "asked", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol),
		func(s *corev1.Service) {
			s.Annotations = map[string]string{api.AnnotationAddresses: "2001:db8:99::11, 10.100.9.3"}
		}))
	e.waitIngress(t, "ds", "asked", "10.100.9.3,2001:db8:99::11")

	// Deleting a Service frees both its addresses: a new one gets them.
	e.delete(t, "ds", "req")
	e.createService(t, lbService("ds", "next", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)))
	e.waitIngress(t, "ds", "next", "10.100.9.1,2001:db8:99::1")

	// A dual-stack pool says so.
	e.createPool(t, "ds-both", map[string]any{"addresses": []any{"10.100.10.0/31", "2001:db8:98::/127"}, "serviceAllocation": map[string]any{"namespaces": []any{"nobody"}}})
	e.waitPoolFamily(t, "ds-both", "IPv4 and IPv6")
}

// waitPoolFamily waits for the pool's status.family.
func (e *apiEnv) waitPoolFamily(t *testing.T, name, want string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "family of pool "+name, func() (bool, string) {
		u, err := e.dyn.Resource(api.AddressPoolResource).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var p api.AddressPool
		if err := api.FromUnstructured(u, &p); err != nil {
			return false, err.Error()
		}
		return p.Status.Family == want, p.Status.Family + " " + p.Status.Error
	})
}
