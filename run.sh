#!/usr/bin/env bash
# The one entry point.
#   ./run.sh                 set up, then run embedded Kafka + streaming job + HTTP server + remoting front (Ctrl-C stops all)
#   ./run.sh test [args]     set up, lint (ruff) and type-check (mypy), then run the whole test suite (args go to pytest)
#   ./run.sh check [args]    the fast loop: lint, types and the unit tests only (seconds; args go to pytest)
#   ./run.sh compat [args]   the whole compatibility matrix (RocketMQ 4.9, 5.3, 5.5); writes docs/compatibility.md
#   ./run.sh multihost [args]  the multi-host bed and its fault tests (network namespaces; root), and the job on a one-host Spark standalone cluster (about 10 minutes)
#   ./run.sh faults [args]   the one-host crash and fault tests (kills, a wiped log, supervision; about 6 minutes)
#   ./run.sh cluster up|down|status  the multi-host bed to try: a Kafka cluster and HDFS on their own hosts
#   ./run.sh docs            serve the documentation site (docs/, mkdocs.yml) on http://127.0.0.1:8000
#   ./run.sh admin ...       the admin CLI (mqadmin's NameServer commands + time travel; ./run.sh admin --help)
#   ./run.sh simulate ...    publish a simulated broker fleet (--brokers N --topics M [--slaves K] [--period S])
#   ./run.sh rocketmq broker|producer|consumer|mqadmin ...  RocketMQ's own broker, quickstart clients, mqadmin (--help)
#   ./run.sh soak [--minutes N] [--catch-up] [--differential SEQ] [--malformed N] [--kills K]  long runs
#   ./run.sh bench [--quick]     benchmark suite (needs Debian's wrk, etcd-server, etcd-client); writes BENCHMARKS.md
#   ./run.sh setup           only create/refresh the virtualenv
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT="$(pwd)"
VENV="$ROOT/.venv"
PY="${NAMESRV_PYTHON:-python3.11}"

die() { echo "run.sh: $*" >&2; exit 1; }

check_java() {
  command -v java >/dev/null 2>&1 || die "Java 17 or newer is required by Spark and was not found on PATH (Debian: apt-get install openjdk-17-jre-headless)"
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ -n "$v" ] && [ "$v" -ge 17 ] || die "Java 17 or newer is required by Spark; found: $(java -version 2>&1 | head -1)"
}

setup() {
  check_java
  command -v "$PY" >/dev/null 2>&1 || PY=python3
  "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || die "Python 3.11 is required (found $("$PY" --version 2>&1)); set NAMESRV_PYTHON to a 3.11 interpreter"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "run.sh: creating $VENV" >&2
    "$PY" -m venv "$VENV"
  fi
  # Reinstall only when pyproject.toml changed (keeps a warm start fast).
  local stamp="$VENV/.namesrv-installed" want
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    local log="$VENV/install.log" started=$SECONDS pid
    echo "run.sh: set-up: installing the project and its pinned Python packages (pyproject.toml) into $VENV" >&2
    { "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip \
        && "$VENV/bin/python" -m pip install --disable-pip-version-check -e ".[test]"; } >"$log" 2>&1 &
    pid=$!
    # progress: what pip is working on, every 10 s, until it ends
    while kill -0 "$pid" 2>/dev/null; do
      sleep 2
      if [ $(( (SECONDS - started) % 10 )) -lt 2 ]; then
        echo "run.sh:   $(grep -c '^Collecting' "$log" 2>/dev/null || true) package(s) resolved, $(( SECONDS - started )) s;" \
             "now: $(grep -E '^(Collecting|Downloading|Installing|Building)' "$log" | tail -1 | cut -c1-80)" >&2
      fi
    done
    if ! wait "$pid"; then
      tail -30 "$log" >&2
      die "installing failed; the full log is $log"
    fi
    echo "run.sh:   done: $(grep -c '^Collecting' "$log" || true) package(s) in $(( SECONDS - started )) s (log $log)" >&2
    echo "$want" > "$stamp"
  fi
  # JVM dependencies (jvm/*/pom.xml: Delta for Spark, Spark's Kafka connector, RocketMQ), fetched
  # once with Maven into .jvm/; afterwards this is a stamp check and needs no network.
  "$VENV/bin/python" -m conf.jvm resolve || die "the JVM dependencies could not be resolved (see above)"
  # Spark's driver JVM starts in half the time from a class archive made once by running the
  # job's query over a few events (pipelines/class_archive_maker.py); afterwards a file check.
  "$VENV/bin/python" -m pipelines.class_archive_maker make || die "the class archive of Spark's driver could not be made (see above)"
  export PYSPARK_PYTHON="$VENV/bin/python" PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
  export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"  # a driver host of a cluster sets its own address
}

# The benchmark's load generator and peer registry come from Debian; installed when missing and
# this user may (root, apt-get present), otherwise a clear message.
bench_tools() {
  local missing=()
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "run.sh: installing ${missing[*]} (Debian packages) for the benchmarks" >&2
    { apt-get install -y "${missing[@]}" || { apt-get update && apt-get install -y "${missing[@]}"; }; } \
      >"$VENV/apt.log" 2>&1 || die "apt-get install ${missing[*]} failed; see $VENV/apt.log"
  else
    die "the benchmarks need ${missing[*]}: apt-get install ${missing[*]}"
  fi
}

# The dashboard's browser tests drive Debian's chromium (never a downloaded browser); installed
# when missing and this user may, otherwise those tests skip naming it.
browser_tools() {
  command -v chromium >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "run.sh: installing Debian's chromium for the dashboard's browser tests" >&2
    { apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; } \
      >"$VENV/apt-chromium.log" 2>&1 || echo "run.sh: apt-get install chromium failed (see $VENV/apt-chromium.log); the browser tests will skip" >&2
  else
    echo "run.sh: chromium is not installed (apt-get install chromium); the browser tests will skip" >&2
  fi
}

# Lint and types first: a finding fails the run before minutes of integration tests.
static_checks() {
  echo "run.sh: ruff" >&2
  "$VENV/bin/ruff" check --quiet . || die "ruff found problems (see above); '.venv/bin/ruff check --fix .' fixes many"
  echo "run.sh: mypy" >&2
  "$VENV/bin/mypy" || die "mypy found problems (see above)"
}

cmd="${1:-run}"
[ $# -gt 0 ] && shift
case "$cmd" in
  run)      setup; exec "$VENV/bin/python" -m ops.launcher "$@" ;;
  test)     setup; browser_tools; static_checks; exec "$VENV/bin/python" -m pytest "$@" ;;
  check)    setup; static_checks; exec "$VENV/bin/python" -m pytest -q -m "not integration" tests "$@" ;;
  compat)   setup; exec "$VENV/bin/python" -m pytest --compat tests/compat "$@" ;;
  multihost) setup; exec "$VENV/bin/python" -m pytest --multihost tests/multihost "$@" ;;
  faults)   setup; exec "$VENV/bin/python" -m pytest --faults -m faults tests "$@" ;;
  cluster)  setup; exec "$VENV/bin/python" -m ops.cluster "$@" ;;
  docs)     setup; NO_MKDOCS_2_WARNING=1 exec "$VENV/bin/mkdocs" serve -a 127.0.0.1:8000 "$@" ;;
  simulate) setup; exec "$VENV/bin/python" -m fleet.simulator "$@" ;;
  admin)    setup; exec "$VENV/bin/python" -m admin "$@" ;;
  rocketmq) setup; exec "$VENV/bin/python" -m ops.rocketmq_cli "$@" ;;
  soak)     setup; exec "$VENV/bin/python" -m fleet.soak "$@" ;;
  bench)    setup; bench_tools; exec "$VENV/bin/python" -m bench "$@" ;;
  setup)    setup; echo "run.sh: ready ($VENV)" ;;
  -h|--help|help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$cmd' (try: ./run.sh, ./run.sh test, ./run.sh check, ./run.sh compat, ./run.sh faults, ./run.sh admin --help, ./run.sh simulate --help, ./run.sh rocketmq --help)" ;;
esac
