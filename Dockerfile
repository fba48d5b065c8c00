# tether: a static binary in a minimal image, for use as a container's
# ENTRYPOINT, or to copy into a runner's image:
#
#   docker build -t tether .
#
#   # in a runner's Dockerfile:
#   FROM tether AS tether
#   FROM node:22.12.0-bookworm-slim
#   COPY --from=tether /usr/local/bin/tether /usr/local/bin/tether
#   RUN mkdir -p /var/lib/tether /run/tether && chmod 1777 /var/lib/tether /run/tether   # only if the runner is not root
#   VOLUME /var/lib/tether
#   ENTRYPOINT ["tether", "run", "--"]
#   CMD ["node", "server.js"]
#
#   # tether's own commands run as they are, not as a supervised runner:
#   docker run --rm -v tether-journal:/var/lib/tether tether tether status
#
# Base images are pinned by exact version; pin them by digest as well where
# your registry policy asks for it. GO_IMAGE replaces the build image (the
# tests build with a stand-in, as the machine they run on has no registry).
# With no registry at all, examples/docker/build-offline.sh builds the same
# image from a binary built by the local Go toolchain.

ARG GO_IMAGE=golang:1.26.8-bookworm
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.releaseVersion=${VERSION}" -o /out/rootfs/usr/local/bin/tether ./cmd/tether
# The image's file system, modes included: the journal's directory (a
# volume) and the socket's are world-writable with the sticky bit, like
# /tmp, so `docker run --user 1000` journals on the volume (each uid in a
# directory of its own there, /var/lib/tether/uid-<uid>) and `docker exec
# C tether intent ls` finds the socket. The CA bundle is Debian's, for
# https to Daytona (replace /etc/ssl/certs/ca-certificates.crt, or set
# SSL_CERT_FILE, for a private CA).
RUN mkdir -p /out/rootfs/var/lib/tether /out/rootfs/run/tether /out/rootfs/tmp /out/rootfs/etc/ssl/certs \
 && chmod 1777 /out/rootfs/var/lib/tether /out/rootfs/run/tether /out/rootfs/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /out/rootfs/etc/ssl/certs/ca-certificates.crt

FROM scratch
# Nested under rootfs/, so COPY keeps the directories' modes.
COPY --from=build /out/rootfs/ /
ENV PATH=/usr/local/bin
VOLUME /var/lib/tether
ENTRYPOINT ["tether", "run", "--"]
