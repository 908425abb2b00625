#!/usr/bin/env bash
# Runs "$@" (etcd, kube-apiserver) as a child that cannot outlive the test harness: the harness
# holds this script's stdin open, and when that pipe closes (the harness ended, even by SIGKILL)
# the child is killed. SIGTERM is passed on as SIGTERM, SIGUSR1 as SIGKILL (an abrupt crash for
# fault tests). The script exits only once the child is gone, so its port is free by then.
exec 3<&0
"$@" </dev/null 3<&- &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
trap 'kill -KILL "$child" 2>/dev/null' USR1
( read -r _ <&3; kill -KILL "$child" 2>/dev/null ) &
watcher=$!
exec 3<&-
status=0
wait "$child" || status=$?
# `wait` returns early when a trapped signal arrives: wait again until the child has really exited.
while kill -0 "$child" 2>/dev/null; do
  wait "$child" || status=$?
done
kill "$watcher" 2>/dev/null
exit "$status"
