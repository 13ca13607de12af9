#!/usr/bin/env bash
# Builds the Kubernetes control plane that xlb's tests run (kube-apiserver
# and kube-controller-manager, from the module in test/k8s/controlplane)
# into a cache directory keyed by the Kubernetes and Go versions, and
# prints that directory on stdout. Progress goes to stderr.
#
# A second run finds both binaries and builds nothing. The first takes
# minutes (about 6 on 2 cores): `make test` runs this before the tests.
#
# Cache: $XLB_KUBE_CACHE if set, else /var/cache/xlb/kube for root and
# ${XDG_CACHE_HOME:-~/.cache}/xlb/kube for anyone else; the binaries land
# in <cache>/<kubernetes version>-<go version>/. Remove it to rebuild.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod=$root/test/k8s/controlplane
bins=(kube-apiserver kube-controller-manager)

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")
if [ -z "$version" ]; then
	echo "kube-build: no k8s.io/kubernetes requirement in $mod/go.mod" >&2
	exit 1
fi
if ! command -v go >/dev/null; then
	echo "kube-build: no Go toolchain on PATH (scripts/deps.sh checks for one)" >&2
	exit 1
fi
goversion=$(go env GOVERSION)

if [ -n "${XLB_KUBE_CACHE:-}" ]; then
	cache=$XLB_KUBE_CACHE
elif [ "$(id -u)" -eq 0 ]; then
	cache=/var/cache/xlb/kube
else
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/xlb/kube
fi
dir=$cache/$version-$goversion

built() {
	local b
	for b in "${bins[@]}"; do
		[ -x "$dir/$b" ] || return 1
	done
}

if ! built; then
	mkdir -p "$cache"
	# Test packages may start control planes in parallel: the first one
	# builds, the others wait here and then find the binaries.
	exec 9>"$cache/.lock"
	if ! flock -n 9; then
		echo "kube-build: waiting for another build in $cache" >&2
		flock 9
	fi
fi
if ! built; then
	echo "kube-build: building Kubernetes $version (kube-apiserver, kube-controller-manager) with $goversion into $dir; the first build takes minutes, later runs reuse it" >&2
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	chmod 755 "$tmp"
	trap 'rm -rf "$tmp"' EXIT
	start=$(date +%s)
	# The same version stamps as Kubernetes' own release builds
	# (hack/lib/version.sh), so that /version reports $version.
	minor=${version#v*.}
	minor=${minor%%.*}
	major=${version#v}
	major=${major%%.*}
	ldflags="-s -w"
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	# Static binaries (no cgo), as Kubernetes releases them; nice: the
	# build is long and must not starve whatever else runs.
	CGO_ENABLED=0 nice -n 10 go -C "$mod" build -trimpath -buildvcs=false \
		-ldflags "$ldflags" -o "$tmp/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
	# One rename publishes both binaries: a reader sees all or nothing.
	rm -rf "$dir"
	mv -T "$tmp" "$dir"
	trap - EXIT
	echo "kube-build: built in $(($(date +%s) - start)) s: $dir" >&2
fi
echo "$dir"
