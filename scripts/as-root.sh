#!/usr/bin/env bash
# Runs the given command as root: directly when we are root, else through
# sudo (keeping PATH and the Go environment), else explains what to do.
# Namespaces and BPF need root.
set -euo pipefail
if [ "$(id -u)" -eq 0 ]; then
	exec "$@"
fi
if command -v sudo >/dev/null; then
	echo "xlb: this needs root (network namespaces, BPF); re-running through sudo" >&2
	exec sudo --preserve-env=CI,GOPATH,GOMODCACHE,GOCACHE,GOFLAGS,GOPROXY env "PATH=$PATH" "$@"
fi
echo "xlb: this needs root (network namespaces, BPF) and sudo is not installed: run it as root, e.g. su -c 'make $*'" >&2
exit 1
