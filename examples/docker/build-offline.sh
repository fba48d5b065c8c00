#!/bin/sh
# Builds the tether image with no registry: the same FROM scratch image as
# the root Dockerfile (a static tether as the ENTRYPOINT, a CA bundle, the
# journal's directory a volume, /var/lib/tether, /run/tether and /tmp
# world-writable with the sticky bit), but the binary is built here by the
# local Go toolchain and the image from a tar, so nothing is pulled. The
# root Dockerfile needs the golang image; use this where `docker build`
# cannot pull it (an air-gapped host, a CI runner without registry access).
#
#   examples/docker/build-offline.sh                   # the image "tether"
#   examples/docker/build-offline.sh -t my/tether:1 --version v1.2.3
#   examples/docker/build-offline.sh runner=./examples/go   # more binaries beside tether
#
# Needs Go and the docker CLI. With no network at all, the module cache must
# already hold the dependencies (run `go mod download` once while online).
# CA_BUNDLE names the CA bundle to copy in (default: the host's
# /etc/ssl/certs/ca-certificates.crt, or /etc/ssl/cert.pem on macOS).
# test/docker builds its image with this script.
set -eu

usage() {
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
}

tag=tether
version=dev
extra=
while [ $# -gt 0 ]; do
	case $1 in
	-t) tag=$2; shift 2 ;;
	--version) version=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*=*) extra="$extra $1"; shift ;;
	*) echo "build-offline.sh: unknown argument $1 (see build-offline.sh -h)" >&2; exit 2 ;;
	esac
done

root=$(cd "$(dirname "$0")/../.." && pwd)
ca=${CA_BUNDLE:-}
if [ -z "$ca" ]; then
	for f in /etc/ssl/certs/ca-certificates.crt /etc/ssl/cert.pem; do
		if [ -f "$f" ]; then ca=$f; break; fi
	done
fi
if [ -z "$ca" ] || [ ! -f "$ca" ]; then
	echo "build-offline.sh: no CA bundle found; set CA_BUNDLE to a PEM file of the CAs tether should trust" >&2
	exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tether-image.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
rootfs=$work/rootfs
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/var/lib/tether" "$rootfs/run/tether" "$rootfs/tmp" "$work/context"
# Writable by any user, sticky like /tmp: a container run with --user 1000
# journals on the volume, and `docker exec C tether intent ls` finds the socket.
chmod 1777 "$rootfs/var/lib/tether" "$rootfs/run/tether" "$rootfs/tmp"
chmod 755 "$rootfs" "$rootfs/usr" "$rootfs/usr/local" "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/etc/ssl" "$rootfs/etc/ssl/certs" "$rootfs/var" "$rootfs/var/lib" "$rootfs/run"
cp "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 644 "$rootfs/etc/ssl/certs/ca-certificates.crt"

build() { # NAME PACKAGE [go build flags]
	name=$1 pkg=$2
	shift 2
	(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath "$@" -o "$rootfs/usr/local/bin/$name" "$pkg") || {
		echo "build-offline.sh: go build $pkg failed; with no network, run 'go mod download' once while online (or set GOFLAGS=-mod=vendor after 'go mod vendor')" >&2
		exit 1
	}
	chmod 755 "$rootfs/usr/local/bin/$name"
}
build tether ./cmd/tether -ldflags "-s -w -X main.releaseVersion=$version"
for e in $extra; do
	build "${e%%=*}" "${e#*=}"
done

# Owned by root in the image, whoever builds it; GNU tar and bsdtar spell it differently.
if tar --version 2>/dev/null | grep -q 'GNU tar'; then
	(cd "$rootfs" && tar --numeric-owner --owner=0 --group=0 -cf "$work/context/rootfs.tar" .)
else
	(cd "$rootfs" && tar --uid 0 --gid 0 -cf "$work/context/rootfs.tar" .)
fi
cat >"$work/context/Dockerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/bin
VOLUME /var/lib/tether
ENTRYPOINT ["tether", "run", "--"]
EOF
# The classic builder: BuildKit may want to pull its Dockerfile front end.
DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build -q -t "$tag" "$work/context" >/dev/null
echo "built $tag"
