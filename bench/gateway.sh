#!/usr/bin/env bash
# Gateway benchmark: one loopback upstream driven four
# ways — direct, a bare httputil.ReverseProxy, `retryhost serve`, and Portkey's
# open-source gateway (@portkey-ai/gateway 1.15.2 with @hono/node-server pinned
# to 1.14.1; the row is skipped when npm is absent). Loopback only; every phase
# is bounded in time and the children are stopped at the end. The timed phases
# run in -rounds rounds (default 5) in which the targets take turns, so that a
# load change on a shared machine falls on every row; the closed loop also
# reports each proxy's read and write syscalls per request.
#
#   bench/gateway.sh [gatewaybench flags…]     e.g. -open 5s -closed 5s -rate 500 -conc 64 -rounds 5
#
# -seq N runs the sequential-client method instead of the open loop (make
# bench-gateway-seq): one client, requests one after another, N per target
# and mode in each round, and the ratios of what each proxy adds to what
# the bare reverse proxy adds in the same run.
#
# retryhost's policy gives its model "upstream_json": true by default, so a
# non-streaming request through `retryhost serve` is non-streamed upstream too
# (as the bare hop's and Portkey's are); -upstream-json=false asks the
# upstream for a stream and collects it, as before.
#
# An A/B of two builds of retryhost in one run (the second one built from
# another checkout): -targets revproxy,retryhost,retryhost-b -retryhost-b PATH.
#
# PORTKEY_DIR reuses an install (a folder with node_modules/@portkey-ai/gateway).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/gatewaybench.XXXXXX")
trap 'rm -rf "$work"' EXIT

go build -o "$work/retryhost" ./cmd/retryhost
go build -o "$work/gatewaybench" ./bench/gatewaybench

# Portkey is installed only when it is among the targets (the default's).
want_pk=1 prev=
for a in "$@"; do
	case $prev in -targets | --targets) [[ $a == *portkey* ]] || want_pk=0 ;; esac
	case $a in -targets=* | --targets=*) [[ $a == *portkey* ]] || want_pk=0 ;; esac
	prev=$a
done

pk=${PORTKEY_DIR:-}
if [[ $want_pk == 0 ]]; then
	:
elif [[ -z $pk ]] && command -v npm >/dev/null 2>&1; then
	pk=$work/portkey
	mkdir -p "$pk"
	# The pin (and the override, which reaches the gateway's own copy): with
	# @hono/node-server >= 1.14.2 every streamed request through it fails with
	# a 500 (TypeError: immutable).
	cat >"$pk/package.json" <<'JSON'
{
  "name": "gatewaybench-portkey",
  "private": true,
  "dependencies": { "@portkey-ai/gateway": "1.15.2", "@hono/node-server": "1.14.1" },
  "overrides": { "@hono/node-server": "1.14.1" }
}
JSON
	if ! (cd "$pk" && npm install --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1); then
		echo "npm install failed (see below); the portkey row is skipped" >&2
		tail -5 "$work/npm.log" >&2
		pk=
	fi
elif [[ -z $pk ]]; then
	echo "npm not found: the portkey row is skipped" >&2
fi

# Thousands of held streams need a descriptor each at both ends of every hop
# (a proxy holding N streams needs 2N): raise the limit as far as allowed
# (root may raise the hard one too) and say what it is.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "open files limit: $(ulimit -n)"

mkdir -p "$work/run"
echo "load before: $(cat /proc/loadavg 2>/dev/null || uptime)"
"$work/gatewaybench" -retryhost "$work/retryhost" -portkey-dir "$pk" -workdir "$work/run" "$@"
echo "load after: $(cat /proc/loadavg 2>/dev/null || uptime)"
