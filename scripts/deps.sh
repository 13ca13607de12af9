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
	# ping, which the end-to-end tests send to a VIP (test/e2e).
	[iputils-ping]=/usr/bin/ping
	# BGP peers of the lab and the tests: FRR (zebra, bgpd, bfdd, vtysh)
	# and gobgpd as the route reflector.
	[frr]=/usr/lib/frr/bgpd
	[gobgpd]=/usr/bin/gobgpd
	# BIRD 2 as the other upstream router the lab and the tests run
	# (`xlb lab up --router bird`): bird and birdc.
	[bird2]=/usr/sbin/bird
	# etcd for the Kubernetes control plane the tests start (testbed/k8stest
	# runs its own etcd on loopback ports; no host etcd service is wanted).
	[etcd-server]=/usr/bin/etcd
	# What `make bench` (bench/httpbench, bench/pktbench) compares xlb
	# with, each started by the bench inside a namespace: nginx as the
	# backends and as an L4 (stream) proxy, HAProxy in TCP mode, and
	# nftables and iptables DNAT.
	[nginx-light]=/usr/sbin/nginx
	[libnginx-mod-stream]=/usr/lib/nginx/modules/ngx_stream_module.so
	[haproxy]=/usr/sbin/haproxy
	[nftables]=/usr/sbin/nft
	[iptables]=/usr/sbin/iptables
	# bench/policybench's TCP stream through the node, as the seed report
	# "eBPF Based Networking" measured it.
	[iperf3]=/usr/bin/iperf3
	# The SYN flood of the NAT end-to-end test (test/e2e/nat_test.go):
	# hping3 --flood --rand-source from a client namespace.
	[hping3]=/usr/sbin/hping3
	# bench/httpbench's profile of a new connection's CPU: perf record
	# on every CPU while wrk runs.
	[linux-perf]=/usr/bin/perf
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
	# The lab, the tests and the benches run their own daemons (frr, gobgpd, bird, nginx, haproxy,
	# etcd) inside namespaces or on loopback ports; none may start on the
	# host. A policy-rc.d that refuses every start does that for
	# invoke-rc.d and for deb-systemd-invoke alike (RUNLEVEL=1 only for
	# the former); an existing one (Docker images have one) is left as
	# it is.
	policy=/usr/sbin/policy-rc.d
	own_policy=
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\n# written by xlb scripts/deps.sh for the duration of apt-get install\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		own_policy=1
	fi
	status=0
	RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
	[ -z "$own_policy" ] || rm -f "$policy"
	[ "$status" -eq 0 ] || exit "$status"
	# Disabled as well, so that a reboot does not start them either.
	if [ -d /run/systemd/system ]; then
		for unit in frr gobgpd bird etcd nginx haproxy; do
			case " ${missing[*]} " in
			*" ${unit}"*) systemctl disable --now "$unit.service" >/dev/null 2>&1 || true ;;
			esac
		done
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
