#!/usr/bin/env bash
# Hot-path comparison: the per-part driver and plugin benchmarks of BASE (any
# git revision) against the work tree, in one run, interleaved — each round
# runs base then head (head then base every other round) with -count=1 — so
# a change of load on a shared machine falls on both sides. Prints per
# benchmark head ÷ base of each round's pair, min / median / max.
#
#   bench/compare.sh BASE                      (make bench-compare BASE=<rev>)
#
# ROUNDS (default 6), BENCHTIME (default 200ms) and MAX (exit 1 when a median
# ratio exceeds it; default 0, never) tune it; DRIVER, HOST and PLUGINS are
# the -bench patterns per package (empty skips the package); GATEWAY (default
# empty) adds gateway benchmarks, e.g. GATEWAY='HeldStreams/(direct|gateway)'
# GATEWAY_BENCHTIME=1x for a held stream's stack beside the per-part rows.
set -euo pipefail
base=${1:?usage: bench/compare.sh BASE}
rounds=${ROUNDS:-6}
benchtime=${BENCHTIME:-200ms}
max=${MAX:-0}
driver=${DRIVER-'StreamPipeline/slice|StreamAfterCommit|RetryableModelStream'}
host=${HOST-'Condition|TransformPart'}
plugins=${PLUGINS-'RefusalPart/^(native|c)$'}
gateway=${GATEWAY-}
gateway_benchtime=${GATEWAY_BENCHTIME:-1x}

cd "$(git rev-parse --show-toplevel)"
work=$(mktemp -d "${TMPDIR:-/tmp}/benchcompare.XXXXXX")
cleanup() {
	git worktree remove --force "$work/base" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
git worktree add --detach "$work/base" "$base" >/dev/null 2>&1 ||
	{ echo "bench/compare.sh: cannot check out $base" >&2; exit 1; }
echo "base $(git -C "$work/base" rev-parse --short HEAD) ($base) against the work tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + changes')"

go build -o "$work/benchcmp" ./bench/benchcmp
pkgs=()
for p in driver:"$driver" host:"$host" plugins:"$plugins" gateway:"$gateway"; do
	pkg=${p%%:*} pat=${p#*:}
	[ -n "$pat" ] || continue
	for side in base head; do
		dir=$PWD
		[ "$side" = base ] && dir=$work/base
		[ -d "$dir/$pkg" ] || continue
		(cd "$dir" && go test -c -o "$work/$side.$pkg.test" "./$pkg") || exit 1
	done
	[ -x "$work/base.$pkg.test" ] && [ -x "$work/head.$pkg.test" ] && pkgs+=("$pkg:$pat")
done

run() { # side round
	local dir=$PWD
	[ "$1" = base ] && dir=$work/base
	for p in "${pkgs[@]}"; do
		pkg=${p%%:*} pat=${p#*:} bt=$benchtime
		[ "$pkg" = gateway ] && bt=$gateway_benchtime
		(cd "$dir/$pkg" && "$work/$1.$pkg.test" -test.run '^$' -test.bench "$pat" \
			-test.benchmem -test.count 1 -test.benchtime "$bt") >>"$work/$1.$(printf %02d "$2").txt"
	done
}
for r in $(seq 1 "$rounds"); do
	echo "round $r of $rounds" >&2
	if [ $((r % 2)) = 1 ]; then run base "$r"; run head "$r"; else run head "$r"; run base "$r"; fi
done
echo "$rounds rounds, -benchtime $benchtime, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/benchcmp" compare -max "$max" "$work"
