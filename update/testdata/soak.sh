#!/bin/bash
# A device's memory over a long run, as it is deployed: mosquitto, the CLI's fleet serve and one agent
# with its HTTP API, link, outbox and telemetry, the tiny model (examples/tinylm) rolled out to it,
# `edgeinfer bench --target` driving 4 closed-loop chat clients against the agent's API for the whole
# run, and a second release rolled out to the device while it serves. Every minute the script samples
# the agent's resident set (/proc/PID/status), its Go heap (the API's /metrics) and the bytes it had
# the kernel write to storage in that minute (/proc/PID/io write_bytes: the store, the outbox, the
# prefix cache's file, the release taken in); at the end it prints
# every window and the growth over the last hour: (mean RSS of its last 5 windows − mean of its first 5)
# ÷ the latter. It fails above 1 %, when the device did not take the update, or when a request failed
# (the bench's failure_rate threshold of 0).
#
# usage (from the repository root; needs mosquitto and `make setup`):
#   update/testdata/soak.sh                 # 120 minutes, the update at minute 20
#   SOAK_MINUTES=15 UPDATE_AT=5 update/testdata/soak.sh   # a short try (the verdict needs ≥ 70 minutes)
set -u
minutes=${SOAK_MINUTES:-120}; update_at=${UPDATE_AT:-20}
W=$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX"); mkdir -p $W/mq
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; [[ -n "${KEEP:-}" ]] || rm -rf "$W"' EXIT
E=$W/edgeinfer
go build -o $E ./runtime/cmd/edgeinfer || exit 1
port=$((20000 + RANDOM % 20000)); B=tcp://127.0.0.1:$port; HP=$((port + 1))
printf 'listener %s 127.0.0.1\nallow_anonymous true\n' $port > $W/mosq.conf
mosquitto -c $W/mosq.conf > $W/mosq.log 2>&1 &
for v in 1 2; do
  $E model import --hf examples/tinylm --out $W/b$v --name tiny --version $v > $W/imp$v.log 2>&1 || { cat $W/imp$v.log; exit 1; }
done
$E fleet keygen --repo $W/repo --keys $W/keys --director > /dev/null 2>&1 || exit 1
$E fleet publish --repo $W/repo --keys $W/keys --bundle $W/b1 > $W/pub1.log 2>&1 || exit 1
$E fleet serve --broker $B --fleet shop --repo $W/repo --keys $W/keys --instance a > $W/serve.log 2>&1 &
cat > $W/agent.json <<JSON
{"store": "$W/dev.db", "broker": "$B", "fleet": "shop", "device": "kiosk-7", "telemetry_interval": "5s",
 "http": {"addr": "127.0.0.1:$HP"},
 "update": {"model": "tiny", "image_root": "$W/repo/image/1.root.json", "director_root": "$W/repo/director/1.root.json",
            "labels": {"line": "1"}, "check_interval": "5m"}}
JSON
$E agent --config $W/agent.json > $W/agent.log 2>&1 & AG=$!
sleep 3
$E fleet rollout --broker $B --fleet shop --release tiny@1 --waves 100 --select line=1 > $W/r1.log 2>&1
served() { curl -sf http://127.0.0.1:$HP/v1/models | grep -q "\"$1\""; }
active() { $E update status --agent-config $W/agent.json 2>/dev/null | grep -q "active $1"; }
for i in $(seq 1 120); do active 1 && served tiny && break; sleep 1; done
active 1 || { echo "the device never activated tiny@1: $(tail -3 $W/agent.log)"; exit 1; }
cat > $W/spec.json <<JSON
{"name": "soak-${minutes}m", "seed": 1, "input": {"kind": "uniform", "min": 16, "max": 96},
 "output": {"kind": "uniform", "min": 16, "max": 48}, "slo": {"preset": "interactive-chat"},
 "thresholds": [{"metric": "failure_rate", "max": 0}],
 "warmup": "3s", "idle": "1s", "drain": "5s", "window": "1m",
 "phases": [{"name": "soak", "kind": "custom", "duration": "${minutes}m", "arrival": {"mode": "closed", "concurrency": 4}}]}
JSON
$E bench --target http://127.0.0.1:$HP --model tiny --spec $W/spec.json --out $W/bench > $W/bench.log 2>&1 & BE=$!
echo "minute  agent RSS MiB  Go heap MiB  written MB  (agent pid $AG; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
written() { awk '/^write_bytes/ {print $2}' /proc/$AG/io; }
w0=$(written); wprev=$w0
start=$(date +%s)
for m in $(seq 1 $minutes); do
  sleep $(( start + 60*m - $(date +%s) ))
  kill -0 $AG 2>/dev/null || { echo "the agent exited: $(tail -3 $W/agent.log)"; exit 1; }
  if [[ $m == "$update_at" ]]; then
    $E fleet publish --repo $W/repo --keys $W/keys --bundle $W/b2 > $W/pub2.log 2>&1 &&
      $E fleet rollout --broker $B --fleet shop --release tiny@2 --waves 100 --select line=1 > $W/r2.log 2>&1 ||
      { echo "release 2 not published or rolled out: $(tail -2 $W/pub2.log $W/r2.log)"; exit 1; }
    echo "minute $m: release tiny@2 published and rolled out"
  fi
  rss=$(awk '/^VmRSS/ {printf "%.1f", $2/1024}' /proc/$AG/status)
  heap=$(curl -sf http://127.0.0.1:$HP/metrics | awk '/^go_memstats_heap_inuse_bytes / {printf "%.1f", $2/1048576}')
  w=$(written)
  printf '%6d  %12s  %11s  %11.1f\n' $m "$rss" "${heap:-null}" $(( w - wprev ))e-6 | tee -a $W/rss.txt
  wprev=$w
done
echo "the agent wrote $(( (wprev - w0) / 1000000 )) MB to storage over the $minutes minutes (write_bytes)"
wait $BE; rc=$?
active 2 || { echo "the device did not activate tiny@2 during the soak: $(grep -i tiny $W/agent.log | tail -3)"; exit 1; }
echo "device active on 2; bench exit $rc: $(grep -iE 'requests|failed' $W/bench.log | head -3 | tr '\n' ' ')"
awk -v m=$minutes '{r[$1]=$2} END {
  if (m < 70) { print "last-hour growth: withheld (a run of " m " minutes; it needs 70)"; exit 0 }
  a=0; b=0; for (i=m-59; i<m-54; i++) a+=r[i]; for (i=m-4; i<=m; i++) b+=r[i]; a/=5; b/=5
  g=(b-a)/a*100; printf "last hour (minutes %d-%d): mean RSS of its first 5 windows %.1f MiB, of its last 5 %.1f MiB: growth %+.2f %% (goal <= 1 %%)\n", m-59, m, a, b, g
  exit !(g <= 1) }' $W/rss.txt || exit 1
exit $rc
