#!/usr/bin/env bash
# The container image without Docker: static musl binaries, FROM scratch,
# built by buildah (vfs storage, chroot isolation: no daemon, no root
# privileges beyond the calling user's) and written as an OCI archive.
#
#   scripts/image.sh [build]     stage, build, write bin/<name>-<version>-<commit>.oci.tar
#   scripts/image.sh stage DIR   the /out tree the Dockerfile's final stage copies from
#   scripts/image.sh archive     print the archive path `build` writes (nothing built)
#   scripts/image.sh env         print the CONTAINERS_CONF / CONTAINERS_STORAGE_CONF exports
#
# The Dockerfile's build stage calls `stage /out`; `build` stages the same tree
# on the host and runs the Dockerfile's final stage verbatim on it, so both
# paths give the same layout, user and labels.
#
# Environment: VERSION (default: the chart's appVersion), IMAGE_NAME
# (default pcp-route-processing), IMAGE_CACHE (default .cache/image: buildah's
# private storage and the containers.conf the podman test also uses).
set -euo pipefail
cd "$(dirname "$0")/.."

name=${IMAGE_NAME:-pcp-route-processing}
# Needed by build, archive and env only: `stage` (the Docker build stage) has
# neither the chart nor a cache.
version() {
  if [ -n "${VERSION:-}" ]; then
    echo "$VERSION"
  else
    awk -F'"' '/^appVersion:/ {print $2}' charts/pcp-route-processing/Chart.yaml
  fi
}
cache_dir() {
  mkdir -p "${IMAGE_CACHE:-.cache/image}" && cd "${IMAGE_CACHE:-.cache/image}" && pwd
}

revision() {
  local rev
  rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  # A build from a tree with uncommitted changes is not that commit.
  if [ "$rev" != unknown ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
    rev="$rev-dirty"
  fi
  echo "$rev"
}

archive_path() {
  local short
  short=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  case "$(revision)" in *-dirty) short="$short-dirty" ;; esac
  echo "bin/$name-$(version)-$short.oci.tar"
}

# Static binaries: musl libc and confluent-kafka-go's bundled musl librdkafka
# (the musl build tag), linked with -static so the image needs no libc.
binaries() {
  local dir=$1
  mkdir -p "$dir"
  CC=${CC_MUSL:-musl-gcc} CGO_ENABLED=1 go build -tags musl -trimpath \
    -ldflags '-s -w -linkmode external -extldflags "-static"' \
    -o "$dir/" ./cmd/ingestor ./cmd/outbox-relay
}

# The tree the final stage copies from (its COPY sources are under /out).
stage() {
  local out=$1 ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
  command -v "${CC_MUSL:-musl-gcc}" >/dev/null || {
    echo "image: musl-gcc not found: apt-get install musl-tools" >&2
    exit 1
  }
  [ -s "$ca" ] || {
    echo "image: no CA bundle at $ca: apt-get install ca-certificates" >&2
    exit 1
  }
  rm -rf "$out"
  mkdir -p "$out/etc/ssl/certs" "$out/usr/local/bin"
  binaries "$out/usr/local/bin"
  install -m 0644 scripts/image/passwd scripts/image/group "$out/etc/"
  install -m 0644 "$ca" "$out/etc/ssl/certs/ca-certificates.crt"
}

# containers.conf and storage.conf of our own, so that buildah and podman
# neither need nor touch the machine's configuration or storage: vfs (works
# in any container or VM), runc and cgroupfs (crun fails on hybrid cgroup
# hierarchies), and ulimits low enough for an unprivileged user namespace.
write_conf() {
  cache=$(cache_dir)
  mkdir -p "$cache/storage" "$cache/run"
  cat >"$cache/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$cache/storage"
runroot = "$cache/run"
EOF
  cat >"$cache/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
}

conf_env() {
  cache=$(cache_dir)
  echo "export CONTAINERS_CONF=$cache/containers.conf CONTAINERS_STORAGE_CONF=$cache/storage.conf"
}

build() {
  for tool in buildah; do
    command -v "$tool" >/dev/null || {
      echo "image: $tool not found: apt-get install buildah" >&2
      exit 1
    }
  done
  write_conf
  export CONTAINERS_CONF=$cache/containers.conf CONTAINERS_STORAGE_CONF=$cache/storage.conf

  local ctx=$cache/context rev created epoch archive tag version
  version=$(version)
  [ -n "$version" ] || { echo "image: no version: set VERSION or the chart's appVersion" >&2; exit 1; }
  rev=$(revision)
  # Created = the commit's time: two builds of one commit are the same image.
  epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
  created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
  archive=$(archive_path)
  # The tag is the archive's name without the image name: <version>-<commit>[-dirty].
  tag=${archive#bin/"$name"-}
  tag=${tag%.oci.tar}

  stage "$ctx/out"
  # The Dockerfile's final stage, verbatim, after a "build" stage that is the
  # staged tree.
  {
    printf 'FROM scratch AS build\nCOPY out/ /out/\n\n'
    awk '/^FROM /{final=""} {final=final $0 "\n"} END {printf "%s", final}' Dockerfile
  } >"$cache/Containerfile"

  buildah build --quiet --isolation chroot --layers=false --identity-label=false \
    --timestamp "$epoch" \
    --build-arg VERSION="$version" --build-arg REVISION="$rev" --build-arg CREATED="$created" \
    -f "$cache/Containerfile" -t "localhost/$name:$tag" -t "localhost/$name:$version" "$ctx" >/dev/null

  mkdir -p "$(dirname "$archive")"
  rm -f "$archive"
  buildah push --quiet "localhost/$name:$tag" "oci-archive:$archive:$name:$tag"
  # The archive is the product; the local copy would only pile up in vfs.
  buildah rmi "localhost/$name:$tag" "localhost/$name:$version" >/dev/null
  buildah rmi --prune >/dev/null 2>&1 || true
  echo "$archive"
}

case "${1:-build}" in
build) build ;;
stage) stage "${2:?usage: image.sh stage DIR}" ;;
archive) archive_path ;;
env) write_conf && conf_env ;;
*)
  echo "usage: scripts/image.sh [build|stage DIR|archive|env]" >&2
  exit 2
  ;;
esac
