#!/usr/bin/env bash
# Installs what `make demo`, `make test` and `make bench` need, on Debian 12.
# Idempotent: a second run installs nothing and takes a second.
set -euo pipefail

# Debian packages, each checked by a file it installs.
declare -A need=(
	[clang]=/usr/bin/clang
	[llvm]=/usr/bin/llvm-strip
	[libbpf-dev]=/usr/include/bpf/bpf_helpers.h
	[linux-libc-dev]=/usr/include/linux/bpf.h
	[bpftool]=/usr/sbin/bpftool
	[iproute2]=/usr/sbin/ip
	[ethtool]=/usr/sbin/ethtool
	[curl]=/usr/bin/curl
	[wrk]=/usr/bin/wrk
	# BGP peers of the lab and the tests: FRR (zebra, bgpd, bfdd, vtysh)
	# and gobgpd as the route reflector.
	[frr]=/usr/lib/frr/bgpd
	[gobgpd]=/usr/bin/gobgpd
	# BIRD 2 as the other upstream router the lab and the tests run
	# (`xlb lab up --router bird`): bird and birdc.
	[bird2]=/usr/sbin/bird
	# etcd for the Kubernetes control plane the tests start (internal/k8stest
	# runs its own etcd on loopback ports; no host etcd service is wanted).
	[etcd-server]=/usr/bin/etcd
)
missing=()
for pkg in "${!need[@]}"; do
	[ -e "${need[$pkg]}" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
	if ! command -v apt-get >/dev/null; then
		echo "deps: missing ${missing[*]} and no apt-get: install them by hand" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# RUNLEVEL=1: invoke-rc.d starts no service (frr, gobgpd, bird) on the host;
	# the lab runs its own daemons inside namespaces.
	RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# Under systemd, etcd-server's postinst enables and starts etcd.service
	# all the same (deb-systemd-invoke ignores RUNLEVEL); the tests run
	# their own etcd, so stop the host one it just installed.
	if [[ " ${missing[*]} " == *" etcd-server "* ]] && [ -d /run/systemd/system ]; then
		systemctl disable --now etcd.service >/dev/null 2>&1 || true
	fi
fi

# Go: the module needs the version in go.mod.
if ! command -v go >/dev/null; then
	echo "deps: no Go toolchain on PATH: install Go $(awk '/^go /{print $2}' go.mod) or newer (https://go.dev/dl)" >&2
	exit 1
fi
want=$(awk '/^go /{print $2}' go.mod)
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
	echo "deps: Go $have is older than $want (go.mod): upgrade Go" >&2
	exit 1
fi
go mod download
