#!/usr/bin/env bash
# Builds (once) the real kube-apiservers and etcds the apiserver suite runs against, and makes sure
# openssl is installed. Idempotent: cached binaries are reused, so CI on the same machine pays each
# build only once. Any failure exits non-zero: the suite must never pass by quietly running against
# nothing.
#
#   bash test/apiserver/build.sh [VERSION ...]   VERSION: 1.20.2 or 1.37.2; none: $KUBE_APISERVER_VERSION,
#                                                or both when that is unset
#   SANDBOX_WATCH_CACHE  where the binaries and the build trees live (default /var/cache/sandbox-watch)
#
# 1.20.2 (the oldest we support): Debian bookworm's `kubernetes` source package (1.20.5+really1.20.2,
#   vendored), built with Debian's Go 1.19, the Go of its day: the Go the machine puts first on PATH
#   is far newer than 1.20's code builds with. Its vendored modern-go/reflect2 v1.0.1 does not work
#   with Go >= 1.18, so it is replaced with Debian's v1.0.2. etcd: Debian's etcd-server (3.4).
# 1.37.2 (what users run): `k8s.io/kubernetes` from the Go module proxy in a wrapper module whose
#   replace lines pin each staging module (`./staging/src/k8s.io/*` in its go.mod, which a dependency's
#   replaces cannot reach) to its published v0.37.2; built with the machine's Go. etcd: a wrapper main
#   around go.etcd.io/etcd/server/v3's etcdmain at 3.6.x (1.37 wants >= 3.5.13 for consistent reads
#   from the watch cache; Debian's 3.4 is too old). This is how kind and the kubernetes e2e images get
#   a release without a git checkout.
set -euo pipefail

started=$(date +%s)
CACHE="${SANDBOX_WATCH_CACHE:-/var/cache/sandbox-watch}"
Legacy="1.20.2"
Modern="1.37.2"
ModernEtcd="3.6.16"

log() { printf '[apiserver build] %s\n' "$*" >&2; }
die() { printf '[apiserver build] FAILED: %s\n' "$*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - started ))s"; }

if [ "$#" -gt 0 ]; then
  versions=("$@")
elif [ -n "${KUBE_APISERVER_VERSION:-}" ]; then
  versions=("$KUBE_APISERVER_VERSION")
else
  versions=("$Legacy" "$Modern")
fi
for v in "${versions[@]}"; do
  [ "$v" = "$Legacy" ] || [ "$v" = "$Modern" ] || die "no build for kube-apiserver $v: this script builds $Legacy and $Modern"
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: cannot install Debian packages"
  SUDO="sudo"
fi

apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then
    log "apt-get update"
    $SUDO apt-get update -qq || die "apt-get update failed"
    apt_updated=1
  fi
}

# Installs the Debian packages whose marker file (a command or path) is missing.
ensure_packages() {
  local missing=()
  while [ "$#" -gt 0 ]; do
    local marker="$1" pkg="$2"; shift 2
    if [[ "$marker" == /* ]]; then
      [ -e "$marker" ] || missing+=("$pkg")
    else
      command -v "$marker" >/dev/null 2>&1 || missing+=("$pkg")
    fi
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_update_once
    log "apt-get install ${missing[*]}"
    local apt_log
    apt_log=$(mktemp)
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$apt_log" 2>&1; then
      tail -n 30 "$apt_log" >&2
      die "apt-get install ${missing[*]} failed"
    fi
    rm -f "$apt_log"
  fi
}

runs() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

ensure_packages openssl openssl
mkdir -p "$CACHE"

# One build at a time on this machine (two CI runs, or a developer and CI). Taken only when
# something is missing, so a warm cache never waits.
locked=0
lock_once() {
  if [ "$locked" -eq 0 ]; then
    exec 9>"$CACHE/build.lock"
    log "waiting for $CACHE/build.lock"
    flock 9
    locked=1
  fi
}

# ---------------------------------------------------------------------------------------------
# 1.20.2 from Debian's source package, with Debian's Go 1.19

build_legacy() {
  local bin="$CACHE/kube-apiserver-$Legacy"
  local etcd="$CACHE/etcd-$Legacy"
  if ! runs "$etcd"; then
    ensure_packages /usr/bin/etcd etcd-server
    ln -sfn /usr/bin/etcd "$etcd"
  fi
  log "etcd for $Legacy: $("$etcd" --version 2>/dev/null | head -n1)"
  if runs "$bin"; then
    log "cached: $bin ($("$bin" --version)); nothing to build"
    return
  fi
  lock_once
  runs "$bin" && { log "built meanwhile by another run: $bin"; return; }
  local step_started
  step_started=$(date +%s)
  log "no cached kube-apiserver at $bin: building it from Debian's source (5 to 30 min on 2 cores, depending on what else runs; about 1.5 min with a warm Go cache)"

  # apt-get source needs a deb-src entry; derive it from the machine's Debian mirror.
  if ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    local mirror
    mirror=$(grep -hE '^URIs:.*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}' || true)
    if [ -z "$mirror" ]; then
      mirror=$(grep -hE '^deb .*/debian/? bookworm' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
        | head -n1 | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit }}' || true)
    fi
    [ -n "$mirror" ] || die "cannot find the Debian mirror in /etc/apt to add a deb-src entry"
    log "adding deb-src $mirror bookworm main (/etc/apt/sources.list.d/sandbox-watch-src.sources)"
    $SUDO tee /etc/apt/sources.list.d/sandbox-watch-src.sources >/dev/null <<SOURCES
Types: deb-src
URIs: $mirror
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    apt_updated=0
  fi

  ensure_packages /usr/lib/go-1.19/bin/go golang-1.19-go rsync rsync dpkg-source dpkg-dev make make \
    /usr/share/gocode/src/github.com/modern-go/reflect2 golang-github-modern-go-reflect2-dev
  # Debian's Go 1.19 first: 1.20's code and its Makefile predate Go 1.21's toolchain rules.
  local go_path="/usr/lib/go-1.19/bin:$PATH"
  log "$(PATH="$go_path" go version)"

  local build="$CACHE/build"
  mkdir -p "$build"
  local src
  src=$(find -H "$build" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1 || true)
  if [ -z "$src" ] || [ ! -f "$src/.sandbox-watch-fetched" ]; then
    [ -z "$src" ] || rm -rf "$src"
    apt_update_once
    log "apt-get source kubernetes (into $build)"
    if ! (cd "$build" && apt-get source -qq kubernetes >"$build/apt-source.log" 2>&1); then
      tail -n 30 "$build/apt-source.log" >&2
      die "apt-get source kubernetes failed (is a deb-src entry for bookworm main configured?)"
    fi
    src=$(find -H "$build" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)
    [ -n "$src" ] || die "apt-get source kubernetes left no kubernetes-* directory in $build"
    touch "$src/.sandbox-watch-fetched"
  fi
  log "source tree: $src"
  grep -q "$Legacy" "$src/debian/changelog" 2>/dev/null || log "note: debian/changelog does not mention $Legacy"

  # reflect2 v1.0.1 -> v1.0.2 (Go >= 1.18).
  if ! grep -q 'github.com/modern-go/reflect2 v1.0.2' "$src/vendor/modules.txt"; then
    log "patching vendored modern-go/reflect2 v1.0.1 -> v1.0.2 (Debian's golang-github-modern-go-reflect2-dev)"
    rm -rf "$src/vendor/github.com/modern-go/reflect2"
    mkdir -p "$src/vendor/github.com/modern-go/reflect2"
    rsync -a --exclude '*_test.go' --exclude 'go.mod' --exclude 'go.sum' \
      /usr/share/gocode/src/github.com/modern-go/reflect2/ "$src/vendor/github.com/modern-go/reflect2/"
    sed -i -E 's|^# github.com/modern-go/reflect2 v1\.0\.1.*$|# github.com/modern-go/reflect2 v1.0.1 => github.com/modern-go/reflect2 v1.0.2|' \
      "$src/vendor/modules.txt"
    sed -i -E 's|(github.com/modern-go/reflect2 => github.com/modern-go/reflect2) v1\.0\.1|\1 v1.0.2|' "$src/go.mod"
    grep -q 'github.com/modern-go/reflect2 v1.0.1 => github.com/modern-go/reflect2 v1.0.2' "$src/vendor/modules.txt" \
      || die "could not patch vendor/modules.txt for reflect2"
    grep -q 'github.com/modern-go/reflect2 => github.com/modern-go/reflect2 v1.0.2' "$src/go.mod" \
      || die "could not patch the reflect2 replace in go.mod"
  fi

  # 1.20 builds in GOPATH mode.
  local gopath_dir="$build/gopath"
  mkdir -p "$gopath_dir/src/k8s.io"
  ln -sfn "$src" "$gopath_dir/src/k8s.io/kubernetes"

  log "make WHAT=cmd/kube-apiserver (log: $build/make.log)"
  if ! (cd "$gopath_dir/src/k8s.io/kubernetes" \
        && PATH="$go_path" GOTOOLCHAIN=local GOPATH="$gopath_dir" GOFLAGS="" GOCACHE="$build/gocache" \
           KUBE_GIT_VERSION="v$Legacy" KUBE_GIT_TREE_STATE=clean \
           make WHAT=cmd/kube-apiserver >"$build/make.log" 2>&1); then
    tail -n 40 "$build/make.log" >&2
    die "make WHAT=cmd/kube-apiserver failed after $(( $(date +%s) - step_started ))s; full log: $build/make.log"
  fi

  local built
  built=$(find "$src/_output" -type f -name kube-apiserver -perm -u+x | head -n1 || true)
  [ -n "$built" ] || die "make succeeded but no kube-apiserver binary under $src/_output"
  "$built" --version >/dev/null 2>&1 || die "$built does not run"
  install -m 0755 "$built" "$bin.tmp"
  mv -f "$bin.tmp" "$bin"
  log "built $bin ($("$bin" --version)) in $(( $(date +%s) - step_started ))s"
}

# ---------------------------------------------------------------------------------------------
# 1.37.2 and etcd 3.6 from the Go module proxy, with the machine's Go

# A wrapper module in $1 requiring $2@$3, with extra go.mod lines from stdin; `go mod tidy` there.
wrapper_module() {
  local dir="$1" module="$2" version="$3" extra
  extra=$(cat)
  mkdir -p "$dir"
  cat >"$dir/go.mod" <<GOMOD
module sandbox-watch.test/$(basename "$dir")

go 1.26.0

require $module $version

$extra
GOMOD
}

build_modern_etcd() {
  local etcd="$CACHE/etcd-$Modern"
  if runs "$etcd"; then
    log "etcd for $Modern: cached $("$etcd" --version 2>/dev/null | head -n1)"
    return
  fi
  lock_once
  local step_started dir="$CACHE/build-etcd-$ModernEtcd"
  step_started=$(date +%s)
  log "building etcd $ModernEtcd from go.etcd.io/etcd/server/v3 (log: $dir/build.log)"
  wrapper_module "$dir" go.etcd.io/etcd/server/v3 "v$ModernEtcd" </dev/null
  cat >"$dir/main.go" <<'GO'
// etcd as its own release builds it: the server's main package is etcdmain.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  if ! (cd "$dir" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod tidy >"$dir/build.log" 2>&1 \
        && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -o "$etcd.tmp" . >>"$dir/build.log" 2>&1); then
    tail -n 40 "$dir/build.log" >&2
    die "building etcd $ModernEtcd failed after $(( $(date +%s) - step_started ))s; full log: $dir/build.log"
  fi
  mv -f "$etcd.tmp" "$etcd"
  log "built $etcd ($("$etcd" --version | head -n1)) in $(( $(date +%s) - step_started ))s"
}

build_modern() {
  build_modern_etcd
  local bin="$CACHE/kube-apiserver-$Modern"
  if runs "$bin"; then
    log "cached: $bin ($("$bin" --version)); nothing to build"
    return
  fi
  lock_once
  runs "$bin" && { log "built meanwhile by another run: $bin"; return; }
  local step_started dir="$CACHE/build-kubernetes-$Modern"
  step_started=$(date +%s)
  log "no cached kube-apiserver at $bin: building k8s.io/kubernetes v$Modern from the Go module proxy (log: $dir/build.log)"
  command -v go >/dev/null || die "no go on PATH: $Modern is built with the machine's Go"
  log "$(GOTOOLCHAIN=local go version)"
  mkdir -p "$dir"
  # The staging modules k8s.io/kubernetes replaces with ./staging/src/k8s.io/*, pinned to their release.
  local mod="$dir/kubernetes.mod"
  if [ ! -s "$mod" ]; then
    (cd "$dir" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$Modern" >"$dir/download.json" 2>>"$dir/build.log") \
      || { tail -n 20 "$dir/build.log" >&2; die "go mod download k8s.io/kubernetes@v$Modern failed"; }
    local gomod
    gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' "$dir/download.json")
    [ -s "$gomod" ] || die "go mod download gave no go.mod for k8s.io/kubernetes@v$Modern"
    cp "$gomod" "$mod"
  fi
  local staging_version="v0.${Modern#1.}"
  local replaces
  replaces=$(awk -v v="$staging_version" '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "replace %s => %s %s\n", $1, $1, v }' "$mod")
  [ -n "$replaces" ] || die "no staging replace lines in k8s.io/kubernetes@v$Modern's go.mod"
  printf '%s\n' "$replaces" | wrapper_module "$dir" k8s.io/kubernetes "v$Modern"
  cat >"$dir/tools.go" <<'GO'
//go:build tools

// Keeps k8s.io/kubernetes/cmd/kube-apiserver's dependencies in go.mod for `go mod tidy`.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  # What hack/lib/version.sh stamps, so --version and /version say the release.
  local minor="${Modern#1.}"; minor="${minor%%.*}"
  local stamp="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=v$Modern -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  log "go mod tidy and go build k8s.io/kubernetes/cmd/kube-apiserver (the first build compiles ~2,000 packages)"
  if ! (cd "$dir" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod tidy >>"$dir/build.log" 2>&1 \
        && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -tags tools -ldflags "-s -w$stamp" \
             -o "$bin.tmp" k8s.io/kubernetes/cmd/kube-apiserver >>"$dir/build.log" 2>&1); then
    tail -n 40 "$dir/build.log" >&2
    die "building kube-apiserver $Modern failed after $(( $(date +%s) - step_started ))s; full log: $dir/build.log"
  fi
  "$bin.tmp" --version >/dev/null 2>&1 || die "$bin.tmp does not run"
  mv -f "$bin.tmp" "$bin"
  log "built $bin ($("$bin" --version)) in $(( $(date +%s) - step_started ))s"
}

for v in "${versions[@]}"; do
  case "$v" in
    "$Legacy") build_legacy ;;
    "$Modern") build_modern ;;
  esac
done
log "ready: ${versions[*]} ($(elapsed))"
