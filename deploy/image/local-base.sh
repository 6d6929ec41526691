#!/usr/bin/env bash
# A Python 3.11 base image made from Debian's own packages, for building elicitd's image where no
# container registry can be reached (only a Debian mirror and PyPI):
#
#   deploy/image/local-base.sh                      # makes localhost/elicitd-base:bookworm
#   podman build --build-arg BASE=localhost/elicitd-base:bookworm -t elicitd:local .
#
# It stands in for python:3.11-slim: Debian bookworm's python3 (3.11) in a virtualenv at
# /opt/python whose bin/ comes first on PATH, so `python` and `pip` mean what they mean in the
# official image, plus `useradd` and CA certificates. CA_BUNDLE (default: this machine's
# bundle) replaces the image's CA bundle and is what pip trusts: a network that reaches PyPI only
# through a TLS-inspecting proxy needs its CA there. Needs root, debootstrap and podman.
set -euo pipefail

SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
TAG=${TAG:-localhost/elicitd-base:${SUITE}}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
WORK=${WORK:-$(mktemp -d /var/tmp/elicitd-base.XXXXXX)}
rootfs="$WORK/rootfs"

if [ ! -x "$rootfs/usr/bin/python3" ]; then
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$rootfs" "$MIRROR"
fi
chroot "$rootfs" /usr/bin/python3 -m venv /opt/python
if [ -n "$CA_BUNDLE" ]; then
  cp "$CA_BUNDLE" "$rootfs/etc/ssl/certs/ca-certificates.crt"
fi
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

tar -C "$rootfs" -c . | podman import \
  --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' \
  - "$TAG" >/dev/null
echo "$TAG"
