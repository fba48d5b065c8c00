#!/bin/sh
# Start-up cost of `tether run -- true` against the init shims people use as
# ENTRYPOINT (tini, dumb-init, catatonit) and against bench/gofloor (a
# minimal static Go program that catches the same signals and runs the same
# child: the floor for any Go supervisor), on the same machine in one run:
# median wall time per start (hyperfine), and the supervisor's peak RSS
# (VmHWM of the supervisor process, read by its child through /proc/$PPID).
# Then the size of each binary and, when a Docker engine is up, of tether's
# FROM scratch image (the root Dockerfile's final stage: the static binary,
# Debian's CA bundle, the journal's and socket's directories).
#
#   bench/startup.sh                 # builds tether into a temp dir
#   TETHER=/path/to/tether bench/startup.sh
#   RUNS=1000 bench/startup.sh
#
# Needs hyperfine; tini, dumb-init and catatonit are measured when installed
# (Debian: apt-get install tini dumb-init catatonit hyperfine). tini runs with
# -s (subreaper), as tether does, so both do the same work outside PID 1.
set -eu

RUNS=${RUNS:-500}
WARMUP=${WARMUP:-50}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -z "${TETHER:-}" ]; then
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/tether" ./cmd/tether)
	TETHER=$work/tether
fi
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/gofloor" ./bench/gofloor)
GOFLOOR=$work/gofloor
command -v hyperfine >/dev/null || { echo "bench: hyperfine not found" >&2; exit 1; }

# tether run opens its journal, socket and spool at start: give it its own,
# on the same file system a container would use.
export TETHER_JOURNAL="$work/journal.db" TETHER_SOCKET="$work/tether.sock" TETHER_SPOOL="$work/spool"
export TETHER_LOG_LEVEL=error

true_bin=$(command -v true)
set -- "$TETHER run --"
command -v tini >/dev/null && set -- "$@" "$(command -v tini) -s --"
command -v dumb-init >/dev/null && set -- "$@" "$(command -v dumb-init)"
command -v catatonit >/dev/null && set -- "$@" "$(command -v catatonit) --"
set -- "$@" "$GOFLOOR"

echo "# $(uname -srm), $(nproc) CPUs, $RUNS runs each after $WARMUP warm-up runs"
echo
echo "| command | median per start | mean ± σ | supervisor peak RSS |"
echo "| --- | ---: | ---: | ---: |"
for sup in "$@" ""; do
	cmd="${sup:+$sup }$true_bin"
	hyperfine -N --warmup "$WARMUP" --runs "$RUNS" --export-json "$work/t.json" "$cmd" >/dev/null 2>&1
	rss=-
	if [ -n "$sup" ]; then
		# shellcheck disable=SC2016 # $PPID is the child shell's
		rss=$($sup /bin/sh -c 'grep VmHWM /proc/$PPID/status' 2>/dev/null | awk '{printf "%.1f MiB", $2/1024}')
	fi
	median=$(sed -n 's/.*"median": *\([0-9.e-]*\).*/\1/p' "$work/t.json" | head -1)
	mean=$(sed -n 's/.*"mean": *\([0-9.e-]*\).*/\1/p' "$work/t.json" | head -1)
	sd=$(sed -n 's/.*"stddev": *\([0-9.e-]*\).*/\1/p' "$work/t.json" | head -1)
	name=$(echo "$cmd" | sed "s|^$TETHER|tether|; s|^$GOFLOOR|bench/gofloor|")
	awk -v n="$name" -v m="$median" -v a="$mean" -v s="$sd" -v r="$rss" \
		'BEGIN { printf "| `%s` | %.2f ms | %.2f ± %.2f ms | %s |\n", n, m*1000, a*1000, s*1000, r }'
done

echo
echo "| binary | size | linked |"
echo "| --- | ---: | --- |"
for bin in "$TETHER" "$(command -v tini-static || true)" "$(command -v tini || true)" "$(command -v dumb-init || true)" "$(command -v catatonit || true)" "$GOFLOOR"; do
	[ -n "$bin" ] || continue
	linked=dynamic
	file -L "$bin" | grep -q 'statically linked' && linked=static
	name=$(echo "$bin" | sed "s|^$TETHER|tether|; s|^$GOFLOOR|bench/gofloor|")
	awk -v n="$name" -v b="$(stat -L -c %s "$bin")" -v l="$linked" 'BEGIN { printf "| `%s` | %.1f KiB | %s |\n", n, b/1024, l }'
done

if docker info >/dev/null 2>&1; then
	# The root Dockerfile's final stage, from the binary built above (the
	# engine here has no registry to pull golang from).
	mkdir -p "$work/image/usr/local/bin" "$work/image/etc/ssl/certs" "$work/image/var/lib/tether" "$work/image/run/tether" "$work/image/tmp"
	chmod 1777 "$work/image/var/lib/tether" "$work/image/run/tether" "$work/image/tmp"
	cp "$TETHER" "$work/image/usr/local/bin/tether"
	cp /etc/ssl/certs/ca-certificates.crt "$work/image/etc/ssl/certs/"
	tar -C "$work/image" --owner=0 --group=0 -cf "$work/rootfs.tar" .
	mkdir "$work/ctx" && mv "$work/rootfs.tar" "$work/ctx/"
	printf 'FROM scratch\nADD rootfs.tar /\nENV PATH=/usr/local/bin\nVOLUME /var/lib/tether\nENTRYPOINT ["tether", "run", "--"]\n' >"$work/ctx/Dockerfile"
	tag=tether-bench-image:$$
	DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$work/ctx" >/dev/null 2>&1
	size=$(docker image inspect -f '{{.Size}}' "$tag")
	docker rmi "$tag" >/dev/null
	echo
	awk -v s="$size" -v c="$(stat -c %s /etc/ssl/certs/ca-certificates.crt)" 'BEGIN { printf "tether image (FROM scratch: static tether, CA bundle of %.0f KiB): %.1f MiB\n", c/1024, s/1048576 }'
fi
