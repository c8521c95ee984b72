#!/usr/bin/env bash
# deps.sh: install what the tests and the demo need on a fresh machine, skipping
# what is present: Go modules, the versitygw S3 server (go install), FUSE
# userspace tools (Debian fuse3; dataccel mounts directly as root, fusermount3
# is the fallback for non-root users), openssl and e2fsprogs.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSITYGW_VERSION=v1.8.0
GOBIN=$(go env GOPATH)/bin
go mod download
if ! go version -m "$GOBIN/versitygw" 2>/dev/null | grep -qE "^\s+mod\s+github.com/versity/versitygw\s+$VERSITYGW_VERSION\s"; then
  echo "installing versitygw $VERSITYGW_VERSION (S3 test server)"
  GOFLAGS=-buildvcs=false go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi
if [[ ! -e /dev/fuse ]]; then
  echo "warning: /dev/fuse is missing: FUSE mounts (and their tests) cannot run here" >&2
fi
# Debian packages: fuse3 (fusermount3; root mounts work without it),
# openssl (deploy's test of gen-cert.sh) and e2fsprogs (mkfs.ext4: the disk
# cache's tests of a full and a read-only file system).
pkgs=()
command -v fusermount3 >/dev/null || pkgs+=(fuse3)
command -v openssl >/dev/null || pkgs+=(openssl)
PATH=$PATH:/usr/sbin:/sbin command -v mkfs.ext4 >/dev/null || pkgs+=(e2fsprogs)
if ((${#pkgs[@]})) && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "installing ${pkgs[*]}"
  (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null) ||
    echo "warning: could not install ${pkgs[*]}" >&2
fi
echo "deps ok: $(go version | cut -d' ' -f3), versitygw $VERSITYGW_VERSION at $GOBIN/versitygw"
