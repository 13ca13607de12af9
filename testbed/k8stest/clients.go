package k8stest

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Clients returns a typed and a dynamic client of AdminUser, with the
// client-side rate limit qps and burst (the set-up of a test or a
// benchmark may want more than client-go's default of 5 and 10).
func (c *ControlPlane) Clients(qps float32, burst int) (*kubernetes.Clientset, *dynamic.DynamicClient, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	rc.QPS, rc.Burst = qps, burst
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return cs, dyn, nil
}

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates the CustomResourceDefinitions in the YAML files, as
// `kubectl apply -f` would, and waits until each is Established and its
// resources can be listed (Established can come a moment before the API
// server serves them), at most timeout in all.
func InstallCRDs(ctx context.Context, dyn dynamic.Interface, timeout time.Duration, files ...string) error {
	crds := dyn.Resource(crdResource)
	var served []schema.GroupVersionResource
	var names []string
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(data, &obj); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		if _, err := crds.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("the API server refuses %s: %w", file, err)
		}
		group, _, _ := unstructured.NestedString(obj, "spec", "group")
		plural, _, _ := unstructured.NestedString(obj, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(obj, "spec", "versions")
		for _, v := range versions {
			if m, ok := v.(map[string]any); ok && m["served"] == true {
				served = append(served, schema.GroupVersionResource{Group: group, Version: fmt.Sprint(m["name"]), Resource: plural})
			}
		}
		names = append(names, u.GetName())
	}
	deadline := time.Now().Add(timeout)
	for {
		why := crdsReady(ctx, dyn, names, served)
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("CRDs not served within %s: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// crdsReady says what is not ready yet of the CRDs named names and their
// served resources; "" when everything is.
func crdsReady(ctx context.Context, dyn dynamic.Interface, names []string, served []schema.GroupVersionResource) string {
	for _, name := range names {
		u, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return fmt.Sprintf("CRD %s not established: %v", name, conds)
		}
	}
	for _, r := range served {
		if _, err := dyn.Resource(r).List(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Sprintf("%s: %v", r.Resource, err)
		}
	}
	return ""
}
