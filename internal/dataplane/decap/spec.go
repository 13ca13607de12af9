package decap

import "github.com/cilium/ebpf"

// Spec returns the backend-host object as compiled into xlb
// (bpf/xlb_backend.c): the XDP decapsulation program that Setup attaches,
// the TC program that translates pods' replies, and their maps.
// internal/backendhost loads the Kubernetes-mode parts from it.
func Spec() (*ebpf.CollectionSpec, error) { return loadBackend() }
