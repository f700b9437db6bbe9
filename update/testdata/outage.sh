#!/bin/bash
# A download through a broker outage, run as a user runs it: mosquitto (with persistence), the CLI's fleet
# serve and agent, the tiny model (examples/tinylm, 16.9 MB) rolled out to an empty device capped at
# 400 KB/s, and the broker stopped for 10 s mid-transfer. fleet serve prints its counters every second;
# the script prints the chunk bytes it sent ÷ the release's bytes and the busiest 10-s window ÷ the cap.
#
# usage (from the repository root; needs mosquitto and `make setup`): update/testdata/outage.sh
set -u
W=$(mktemp -d "${TMPDIR:-/tmp}/outage.XXXXXX"); mkdir -p $W/mq
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
E=$W/edgeinfer
go build -o $E ./runtime/cmd/edgeinfer || exit 1
port=$((20000 + RANDOM % 20000)); B=tcp://127.0.0.1:$port
printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/mq/\n' $port $W > $W/mosq.conf
mosquitto -c $W/mosq.conf > $W/mosq.log 2>&1 & MQ=$!
sleep 1
$E model import --hf examples/tinylm --out $W/b1 --name tiny --version 1 > $W/imp.log 2>&1 || exit 1
$E fleet keygen --repo $W/repo --keys $W/keys --director > /dev/null 2>&1 || exit 1
$E fleet publish --repo $W/repo --keys $W/keys --bundle $W/b1 > $W/pub.log 2>&1 || exit 1
rel=$(find $W/b1 -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
$E fleet serve --broker $B --fleet shop --repo $W/repo --keys $W/keys --instance a --stats-every 1s > $W/serve.log 2>&1 & SV=$!
cat > $W/agent.json <<JSON
{"store": "$W/dev.db", "broker": "$B", "fleet": "shop", "device": "kiosk-7", "telemetry_interval": "5s",
 "update": {"model": "tiny", "image_root": "$W/repo/image/1.root.json", "director_root": "$W/repo/director/1.root.json",
            "labels": {"line": "1"}, "check_interval": "5m", "max_bytes_per_sec": 400000}}
JSON
$E agent --config $W/agent.json > $W/agent.log 2>&1 & AG=$!
sleep 3
$E fleet rollout --broker $B --fleet shop --release tiny@1 --waves 100 --select line=1 > $W/r1.log 2>&1
sleep 15
echo "broker stop at $(date +%T)"; kill $MQ; wait $MQ 2>/dev/null
sleep 10
mosquitto -c $W/mosq.conf >> $W/mosq.log 2>&1 & MQ=$!
echo "broker back at $(date +%T)"
for i in $(seq 1 120); do # the device reports only through the store this script cannot watch otherwise
  $E update status --agent-config $W/agent.json 2>/dev/null | grep -q "active 1" && break; sleep 1
done
echo "active: $($E update status --agent-config $W/agent.json 2>/dev/null | grep -o 'active [0-9]*' | head -1) at $(date +%T)"
sleep 2
kill $AG $SV; wait $AG $SV 2>/dev/null; kill $MQ; wait $MQ 2>/dev/null
[[ $($E update status --agent-config $W/agent.json 2>/dev/null) == *"active 1"* ]] || { echo "the device never activated tiny@1: $(tail -2 $W/agent.log)"; exit 1; }
grep -c "update: resuming" $W/agent.log | sed 's/^/agent "resuming" lines: /'
grep -oE '"chunk_bytes":[0-9]+' $W/serve.log | cut -d: -f2 > $W/cb.txt
awk -v rel=$rel -v cap=400000 '{b[NR]=$1} END {n=NR; tot=b[n]; w=0; for(i=11;i<=n;i++){d=b[i]-b[i-10]; if(d>w)w=d}
  printf "release %d bytes; chunk bytes sent %d (%.3f× the release); busiest 10-s window %d bytes = %.3f× the cap (%d one-second samples)\n", rel, tot, tot/rel, w, w/(cap*10), n
  exit !(tot <= 1.1*rel && w <= 1.1*cap*10)}' $W/cb.txt
