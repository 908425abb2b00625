#!/usr/bin/env bash
# The real-apiserver suite against each version in turn (`KUBE_APISERVER_VERSION`, else 1.20.2 and
# 1.37.2), each with its own etcd and its own report in .cache/vitest/apiserver-<version>.json.
# Builds what is missing first. Extra arguments go to vitest (a file filter, -t).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${KUBE_APISERVER_VERSION:-}" ]; then versions=("$KUBE_APISERVER_VERSION"); else versions=(1.20.2 1.37.2); fi
bash test/apiserver/build.sh "${versions[@]}" || exit 1
status=0
for v in "${versions[@]}"; do
  echo "::: the apiserver suite against kube-apiserver $v"
  KUBE_APISERVER_VERSION="$v" npx vitest run --config test/apiserver/vitest.config.ts "$@" || status=1
done
exit $status
