#!/usr/bin/env bash
# Builds (once) the real kube-apiserver 1.20.2 the apiserver suite runs against, and makes sure
# etcd and openssl are installed. Idempotent: a cached binary is reused, so CI on the same machine
# pays the build (5 to 30 min) only once. Any failure exits non-zero: the suite must never pass by
# quietly running against nothing.
#
#   SANDBOX_WATCH_CACHE  where the binary and the build tree live (default /var/cache/sandbox-watch)
#
# Source: Debian bookworm's `kubernetes` source package (1.20.5+really1.20.2, vendored). Its
# vendored modern-go/reflect2 v1.0.1 does not work with Go >= 1.18, so it is replaced with
# Debian's reflect2 v1.0.2 before building with Debian's Go.
set -euo pipefail

started=$(date +%s)
CACHE="${SANDBOX_WATCH_CACHE:-/var/cache/sandbox-watch}"
VERSION="1.20.2"
BIN="$CACHE/kube-apiserver-$VERSION"

log() { printf '[apiserver build] %s\n' "$*" >&2; }
die() { printf '[apiserver build] FAILED: %s\n' "$*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - started ))s"; }

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

# What the harness needs at run time, whether or not the binary is cached.
ensure_packages etcd etcd-server openssl openssl
log "etcd: $(etcd --version 2>/dev/null | head -n1)"

mkdir -p "$CACHE"
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  log "cached: $BIN ($("$BIN" --version)); nothing to build ($(elapsed))"
  exit 0
fi

# One build at a time on this machine (two CI runs, or a developer and CI).
exec 9>"$CACHE/build.lock"
log "waiting for $CACHE/build.lock"
flock 9
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  log "built meanwhile by another run: $BIN ($(elapsed))"
  exit 0
fi

log "no cached kube-apiserver at $BIN: building it from Debian's source (5 to 30 min on 2 cores, depending on what else runs; about 1.5 min with a warm Go cache)"

# apt-get source needs a deb-src entry; derive it from the machine's Debian mirror.
if ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  mirror=$(grep -hE '^URIs:.*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}' || true)
  if [ -z "$mirror" ]; then
    mirror=$(grep -hE '^deb .*/debian/? bookworm' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | head -n1 | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit }}' || true)
  fi
  [ -n "$mirror" ] || die "cannot find the Debian mirror in /etc/apt to add a deb-src entry"
  log "adding deb-src $mirror bookworm main (/etc/apt/sources.list.d/sandbox-watch-src.sources)"
  $SUDO tee /etc/apt/sources.list.d/sandbox-watch-src.sources >/dev/null <<EOF
Types: deb-src
URIs: $mirror
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt_updated=0
fi

ensure_packages go golang-go rsync rsync dpkg-source dpkg-dev make make \
  /usr/share/gocode/src/github.com/modern-go/reflect2 golang-github-modern-go-reflect2-dev
go_version=$(go version)
log "$go_version"

BUILD="$CACHE/build"
mkdir -p "$BUILD"
SRC=$(find -H "$BUILD" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1 || true)
if [ -z "$SRC" ] || [ ! -f "$SRC/.sandbox-watch-fetched" ]; then
  [ -z "$SRC" ] || rm -rf "$SRC"
  apt_update_once
  log "apt-get source kubernetes (into $BUILD)"
  if ! (cd "$BUILD" && apt-get source -qq kubernetes >"$BUILD/apt-source.log" 2>&1); then
    tail -n 30 "$BUILD/apt-source.log" >&2
    die "apt-get source kubernetes failed (is a deb-src entry for bookworm main configured?)"
  fi
  SRC=$(find -H "$BUILD" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)
  [ -n "$SRC" ] || die "apt-get source kubernetes left no kubernetes-* directory in $BUILD"
  touch "$SRC/.sandbox-watch-fetched"
fi
log "source tree: $SRC"
grep -q "gitVersion.*v$VERSION\|$VERSION" "$SRC/debian/changelog" 2>/dev/null || log "note: debian/changelog does not mention $VERSION"

# reflect2 v1.0.1 -> v1.0.2 (Go >= 1.18).
if ! grep -q 'github.com/modern-go/reflect2 v1.0.2' "$SRC/vendor/modules.txt"; then
  log "patching vendored modern-go/reflect2 v1.0.1 -> v1.0.2 (Debian's golang-github-modern-go-reflect2-dev)"
  rm -rf "$SRC/vendor/github.com/modern-go/reflect2"
  mkdir -p "$SRC/vendor/github.com/modern-go/reflect2"
  rsync -a --exclude '*_test.go' --exclude 'go.mod' --exclude 'go.sum' \
    /usr/share/gocode/src/github.com/modern-go/reflect2/ "$SRC/vendor/github.com/modern-go/reflect2/"
  sed -i -E 's|^# github.com/modern-go/reflect2 v1\.0\.1.*$|# github.com/modern-go/reflect2 v1.0.1 => github.com/modern-go/reflect2 v1.0.2|' \
    "$SRC/vendor/modules.txt"
  sed -i -E 's|(github.com/modern-go/reflect2 => github.com/modern-go/reflect2) v1\.0\.1|\1 v1.0.2|' "$SRC/go.mod"
  grep -q 'github.com/modern-go/reflect2 v1.0.1 => github.com/modern-go/reflect2 v1.0.2' "$SRC/vendor/modules.txt" \
    || die "could not patch vendor/modules.txt for reflect2"
  grep -q 'github.com/modern-go/reflect2 => github.com/modern-go/reflect2 v1.0.2' "$SRC/go.mod" \
    || die "could not patch the reflect2 replace in go.mod"
fi

# 1.20 builds in GOPATH mode.
GOPATH_DIR="$BUILD/gopath"
mkdir -p "$GOPATH_DIR/src/k8s.io"
ln -sfn "$SRC" "$GOPATH_DIR/src/k8s.io/kubernetes"

log "make WHAT=cmd/kube-apiserver (log: $BUILD/make.log)"
make_started=$(date +%s)
if ! (cd "$GOPATH_DIR/src/k8s.io/kubernetes" \
      && GOPATH="$GOPATH_DIR" GOFLAGS="" GOCACHE="$BUILD/gocache" \
         KUBE_GIT_VERSION="v$VERSION" KUBE_GIT_TREE_STATE=clean \
         make WHAT=cmd/kube-apiserver >"$BUILD/make.log" 2>&1); then
  tail -n 40 "$BUILD/make.log" >&2
  die "make WHAT=cmd/kube-apiserver failed after $(( $(date +%s) - make_started ))s; full log: $BUILD/make.log"
fi
log "make took $(( $(date +%s) - make_started ))s"

built=$(find "$SRC/_output" -type f -name kube-apiserver -perm -u+x | head -n1 || true)
[ -n "$built" ] || die "make succeeded but no kube-apiserver binary under $SRC/_output"
"$built" --version >/dev/null 2>&1 || die "$built does not run"
install -m 0755 "$built" "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"
log "built $BIN ($("$BIN" --version)) in $(elapsed)"
