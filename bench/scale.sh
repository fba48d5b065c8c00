#!/bin/sh
# `tether run -- true` on a journal an earlier run left with 0, 1,000 and
# 10,000 live intents, without provider credentials: wall time per start and
# exit (hyperfine, median), bytes tether writes to stderr, and tether's peak
# RSS (GNU time's maximum resident set size, which covers the drain after
# the child exits).
#
#   bench/scale.sh                      # builds tether into a temp dir
#   TETHER=/path/to/tether bench/scale.sh
#   RUNS=50 SIZES="0 1000 10000 50000" bench/scale.sh
#
# Needs hyperfine and GNU time (Debian: apt-get install hyperfine time).
# Each run gets a fresh copy of the journal, so what one run writes (an
# older tether noted a reason on every intent) never helps the next.
set -eu

RUNS=${RUNS:-30}
WARMUP=${WARMUP:-3}
SIZES=${SIZES:-0 1000 10000}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -z "${TETHER:-}" ]; then
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/tether" ./cmd/tether)
	TETHER=$work/tether
fi
(cd "$here" && go build -o "$work/filljournal" ./bench/filljournal)
command -v hyperfine >/dev/null || { echo "bench: hyperfine not found" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: GNU time (/usr/bin/time) not found" >&2; exit 1; }

# No provider: the Daytona variables are removed from the environment.
for v in $(env | sed -n 's/^\(DAYTONA_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export TETHER_JOURNAL="$work/run.db" TETHER_SOCKET="$work/tether.sock" TETHER_SPOOL="$work/spool"
true_bin=$(command -v true)

echo "# $(uname -srm), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $RUNS runs each after $WARMUP warm-up runs"
echo
echo "| live intents | median start and exit | mean ± σ | stderr bytes | stderr lines | peak RSS |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for n in $SIZES; do
	"$work/filljournal" -journal "$work/j$n.db" -n "$n"
	hyperfine -N --warmup "$WARMUP" --runs "$RUNS" --prepare "cp $work/j$n.db $work/run.db" \
		--export-json "$work/t.json" "$TETHER run -- $true_bin" >/dev/null 2>&1
	cp "$work/j$n.db" "$work/run.db"
	/usr/bin/time -f '%M' -o "$work/rss" "$TETHER" run -- "$true_bin" 2>"$work/stderr"
	bytes=$(wc -c <"$work/stderr")
	lines=$(wc -l <"$work/stderr")
	rss=$(tail -1 "$work/rss")
	median=$(sed -n 's/.*"median": *\([0-9.e-]*\).*/\1/p' "$work/t.json" | head -1)
	mean=$(sed -n 's/.*"mean": *\([0-9.e-]*\).*/\1/p' "$work/t.json" | head -1)
	sd=$(sed -n 's/.*"stddev": *\([0-9.e-]*\).*/\1/p' "$work/t.json" | head -1)
	awk -v n="$n" -v m="$median" -v a="$mean" -v s="$sd" -v b="$bytes" -v l="$lines" -v r="$rss" \
		'BEGIN { printf "| %d | %.1f ms | %.1f ± %.1f ms | %d | %d | %.1f MiB |\n", n, m*1000, a*1000, s*1000, b, l, r/1024 }'
done
