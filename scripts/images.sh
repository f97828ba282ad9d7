#!/usr/bin/env bash
# Makes every image docker-compose.yaml and the container tests run, on a
# Docker engine that can pull nothing (no registry on the project's machines),
# under the names a user with a registry would pull, so that the files a user
# runs (Dockerfile, docker-compose.yaml) are the files the tests run:
#
#   debian:bookworm-slim   Debian's minbase, made by debootstrap and imported
#                          (the Dockerfile's runtime stage, and the base below)
#   golang:1.26-bookworm   that base plus this machine's Go toolchain (the
#                          Dockerfile's build stage)
#   nats:<minor>           a FROM-scratch image of nats-server built from the
#                          Go module go.mod pins, laid out as the official one
#                          (the services need 2.10 or newer)
#   redis:7                the Debian base plus Debian's redis-server, laid out
#                          as the official one (/data, protected mode off when
#                          no config file is given)
#   ralph:<hash>           `docker build` of the Dockerfile; the tag is a hash
#                          of what the Dockerfile copies, also tagged
#                          ralph:latest (docker-compose.yaml's default)
#
# An image already present under its name is used as it is (one pulled from a
# registry too); one this script made is made again only when its inputs
# changed (the hash is in the label org.ralphmesh.inputs). Everything it
# prints goes to stderr but the last line on stdout: the ralph image's name.
# Usage: bash scripts/images.sh            (RALPH_IMAGES_QUIET=1: build logs only on failure)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say() { printf '== images: %s\n' "$*" >&2; }
hash_of() { sha256sum | cut -c1-16; }
label_of() { docker image inspect -f '{{index .Config.Labels "org.ralphmesh.inputs"}}' "$1" 2>/dev/null || true; }
present() { docker image inspect "$1" >/dev/null 2>&1; }

# needs NAME INPUTS: true when NAME must be made: it is missing, or this
# script made it (it carries the label) from other inputs.
needs() {
  present "$1" || return 0
  local have
  have=$(label_of "$1")
  [ -n "$have" ] && [ "$have" != "$2" ]
}

# build TAG DIR [docker build args...]: docker build, its log shown only when
# it fails (or always without RALPH_IMAGES_QUIET).
build() {
  local tag=$1 dir=$2
  shift 2
  local log="$work/build-${tag//[:\/]/_}.log"
  if ! docker build -t "$tag" "$@" "$dir" >"$log" 2>&1; then
    cat "$log" >&2
    echo "images: docker build of $tag failed" >&2
    exit 1
  fi
  [ -n "${RALPH_IMAGES_QUIET:-}" ] || tail -n 3 "$log" >&2
}

debian_base() {
  local name=debian:bookworm-slim inputs
  inputs=$(echo "debootstrap minbase bookworm v1" | hash_of)
  needs "$name" "$inputs" || { say "$name: present"; return; }
  command -v debootstrap >/dev/null || {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    else
      echo "images: $name is missing and debootstrap is not installed (apt-get install debootstrap)" >&2
      exit 1
    fi
  }
  say "$name: debootstrap --variant=minbase bookworm (about a minute or two)"
  local rootfs="$work/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 30 "$work/debootstrap.log" >&2; echo "images: debootstrap failed" >&2; exit 1; }
  # Debian's three suites in deb822 form, from the mirror debootstrap used.
  local mirror
  mirror=$(awk '$1 == "deb" {print $2; exit}' "$rootfs/etc/apt/sources.list")
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # As the official slim image: no package lists or downloaded packages, no
  # docs, man pages or translations, now or in later installs.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/info/*
  find "$rootfs/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
  : >"$rootfs/etc/hostname"
  rm -f "$rootfs/etc/resolv.conf"
  tar -C "$rootfs" --numeric-owner -c . |
    docker import -c 'CMD ["bash"]' -c "LABEL org.ralphmesh.inputs=$inputs" - "$name" >/dev/null
  say "$name: imported"
}

golang_image() {
  local name=golang:1.26-bookworm goroot version inputs
  goroot=$(go env GOROOT)
  version=$(go env GOVERSION)
  local cabundle=/etc/ssl/certs/ca-certificates.crt
  [ -f "$cabundle" ] || { echo "images: $cabundle is missing: this machine's CA bundle is what the Go build trusts (apt-get install ca-certificates)" >&2; exit 1; }
  inputs=$( (echo "golang v2"; go version; cat "$goroot/VERSION" "$cabundle") | hash_of)
  needs "$name" "$inputs" || { say "$name: present"; return; }
  say "$name: debian:bookworm-slim plus $version from $goroot"
  local dir="$work/golang"
  mkdir -p "$dir"
  cp -a "$goroot" "$dir/go"
  cp "$cabundle" "$dir/ca-certificates.crt"
  # As the official image: git and CA certificates (modules over HTTPS), Go
  # in /usr/local/go, GOPATH /go. The CA bundle is this machine's: where its
  # traffic leaves through a TLS-inspecting proxy, a build in a container
  # must trust what the machine trusts to reach the Go module proxy.
  cat >"$dir/Dockerfile" <<EOF
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates git && rm -rf /var/lib/apt/lists/*
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY go /usr/local/go
ENV GOLANG_VERSION=${version#go} GOTOOLCHAIN=local GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN mkdir -p /go/src /go/bin && chmod -R 1777 /go
WORKDIR /go
LABEL org.ralphmesh.inputs=$inputs
EOF
  build "$name" "$dir"
}

# nats_tag is the image name docker-compose.yaml uses for NATS.
nats_tag() { sed -n 's/^ *image: *\(nats:[^ ]*\).*/\1/p' docker-compose.yaml | head -n1; }

nats_image() {
  local name version inputs
  name=$(nats_tag)
  [ -n "$name" ] || { echo "images: no nats image in docker-compose.yaml" >&2; exit 1; }
  version=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
  # The tag names the minor version of what is in the image.
  local minor=${version#v}
  minor=${minor%.*}
  [ "$name" = "nats:$minor" ] || {
    echo "images: docker-compose.yaml names $name but go.mod pins nats-server $version: make the tag nats:$minor" >&2
    exit 1
  }
  inputs=$( (echo "nats v1"; echo "$version"; go version) | hash_of)
  needs "$name" "$inputs" || { say "$name: present"; return; }
  say "$name: nats-server $version from the Go module, FROM scratch"
  local dir="$work/nats"
  mkdir -p "$dir"
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dir/nats-server" github.com/nats-io/nats-server/v2
  # The official image's configuration: clients on 4222, monitoring on
  # 8222, routes on 6222; compose and the tests pass their own flags.
  cat >"$dir/nats-server.conf" <<'EOF'
port: 4222
monitor_port: 8222
cluster {
  name: "NATS"
  port: 6222
}
EOF
  cat >"$dir/Dockerfile" <<EOF
FROM scratch
COPY nats-server /nats-server
COPY nats-server.conf /nats-server.conf
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["--config", "nats-server.conf"]
LABEL org.ralphmesh.inputs=$inputs org.ralphmesh.nats-server=$version
EOF
  build "$name" "$dir"
}

redis_image() {
  local name=redis:7 inputs
  inputs=$(echo "redis debian bookworm v1" | hash_of)
  needs "$name" "$inputs" || { say "$name: present"; return; }
  say "$name: debian:bookworm-slim plus Debian's redis-server"
  local dir="$work/redis"
  mkdir -p "$dir"
  # The official image's entrypoint behaviour that compose relies on: with
  # no configuration file, protected mode is off so other containers can
  # connect; the server runs as the redis user in /data.
  cat >"$dir/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -e
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then set -- redis-server "$@"; fi
if [ "$1" = redis-server ] && [ "${2%.conf}" = "${2:-}" ]; then
  shift
  set -- redis-server --protected-mode no "$@"
fi
exec "$@"
EOF
  chmod 0755 "$dir/docker-entrypoint.sh"
  cat >"$dir/Dockerfile" <<EOF
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools && rm -rf /var/lib/apt/lists/* \
 && mkdir /data && chown redis:redis /data
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /data
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
LABEL org.ralphmesh.inputs=$inputs
EOF
  build "$name" "$dir"
}

# ralph_image builds the Dockerfile. Its tag hashes exactly what the
# Dockerfile copies (.dockerignore leaves out the tests), so a run with
# unchanged sources reuses the image, and docker's layer cache reuses the
# package layer whatever changed.
ralph_image() {
  local inputs name
  inputs=$(
    {
      sha256sum Dockerfile .dockerignore
      find go.mod go.sum cmd internal pkg services -type f ! -name '*_test.go' -print0 | sort -z | xargs -0 sha256sum
    } | hash_of
  )
  name=ralph:$inputs
  if present "$name"; then
    say "$name: present"
  else
    say "$name: docker build (the Go build inside takes a few minutes on 2 cores)"
    build "$name" "$root" --label "org.ralphmesh.inputs=$inputs"
  fi
  docker tag "$name" ralph:latest
  echo "$name"
}

command -v docker >/dev/null || { echo "images: docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "images: the Docker daemon does not answer (docker info)" >&2; exit 1; }
debian_base
golang_image
nats_image
redis_image
ralph_image
