// Package deploy holds xlb's Kubernetes install: the manifests of this
// directory (applied with `kubectl apply -f deploy/crds/ -f deploy/`),
// the CRDs in crds/, and the Helm chart in helm/xlb, which renders the
// same objects. The CRDs are generated from internal/k8s/api (make
// generate). The package has no code; its tests check the manifests
// against a real kube-apiserver, and the chart, with Helm's own packages,
// against the manifests and the API server (install and upgrade).
package deploy
