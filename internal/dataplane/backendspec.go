package dataplane

import "github.com/cilium/ebpf"

// BackendSpec returns the backend-host object as compiled into xlb
// (bpf/xlb_backend.c): the XDP decapsulation program that SetupDecap
// attaches, the TC program that translates pods' replies, and their maps.
// internal/backendhost loads the Kubernetes-mode parts from it.
func BackendSpec() (*ebpf.CollectionSpec, error) { return loadBackend() }
