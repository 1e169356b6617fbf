#!/usr/bin/env bash
# Makes a Debian bookworm base image with Python 3.11 locally, for machines that cannot pull
# python:3.11-slim from a registry (air-gapped builds, the project's CI):
#   deploy/base-image.sh [IMAGE] [ENGINE]       (defaults: cachewarden-base:bookworm, podman)
# then build with --build-arg BASE_IMAGE=localhost/IMAGE (see deploy/Dockerfile).
# Packages come from the Debian mirror at debootstrap time, because a container cannot reach the
# package registries; python3-venv gives the image a pip (ensurepip) without the network.
# Takes a few minutes; does nothing when the image already exists.
set -euo pipefail
image="${1:-cachewarden-base:bookworm}"
engine="${2:-podman}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if "$engine" image exists "$image" 2>/dev/null; then
  exit 0
fi
root="$(mktemp -d /var/tmp/cachewarden-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase \
  --include=python3,python3-venv,ca-certificates \
  bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# Nothing of apt's state is needed in an image that never runs apt.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | "$engine" import \
  --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$image" >/dev/null
