#!/bin/bash
# budget.sh: three models under a memory budget that fits two, as a user
# sees it with curl. examples/tinylm is imported under three names
# (lm-a, lm-b, lm-c); edgeinfer serve first runs them with room for all
# (to read what each counts against a budget: memory_bytes in
# /v1/models), then again with --memory-budget = the three's sum less half
# the smallest, so any two fit and the three never do. 30 chat requests
# alternate among the three: every one must answer 200; a request that had
# to load its model says how long that took (X-Edgeinfer-Load-Ms). The
# server's resident set (VmRSS) is sampled every 10 ms meanwhile; with
# --keep-alive 1s the models unload once the requests stop, and the RSS
# then is the process's baseline (Go, ONNX Runtime's environment and what
# its sessions leave process-wide). It prints the budget, the loads, the
# peak RSS and the peak over the baseline as a share of the budget, and
# exits 1 if a request failed. Needs curl and Go.
set -u
cd "$(dirname "$0")/../../.."
D=$(mktemp -d); trap 'rm -rf $D' EXIT
go build -o $D/edgeinfer ./runtime/cmd/edgeinfer || exit 1
for n in a b c; do
  $D/edgeinfer model import --hf examples/tinylm --name lm-$n --out $D/lm-$n >/dev/null || exit 1
done
models="--model $D/lm-a --model $D/lm-b --model $D/lm-c"
port=$((20000 + RANDOM % 20000))
start() { # start BUDGET: serve the three under BUDGET
  $D/edgeinfer serve $models --addr 127.0.0.1:$port --threads 1 --kv-budget $((32 << 20)) --memory-budget $1 --keep-alive 1s -v > $D/serve.log 2>&1 & pid=$!
  for i in $(seq 1 100); do curl -s 127.0.0.1:$port/ready >/dev/null 2>&1 && return; sleep 0.1; done
  echo "serve did not start:"; cat $D/serve.log; exit 1
}
stop() { kill $pid; wait $pid 2>/dev/null; }
trap 'kill $pid 2>/dev/null; rm -rf $D' EXIT
rss() { awk '/^VmRSS/ {print $2 * 1024}' /proc/$pid/status; }
mib() { awk -v b=$1 'BEGIN {printf "%.1f MiB", b / 1048576}'; }

start 1GiB
sizes=$(curl -s 127.0.0.1:$port/v1/models | grep -o '"memory_bytes":[0-9]*' | cut -d: -f2)
stop
total=0; least=
for s in $sizes; do total=$((total + s)); [[ -z $least || $s -lt $least ]] && least=$s; done
budget=$((total - least / 2))
echo "counted per model: $(for s in $sizes; do mib $s; echo -n '; '; done)budget $(mib $budget) (fits two, not three)"

start $budget
( peak=0; while kill -0 $pid 2>/dev/null; do r=$(rss); [[ ${r:-0} -gt $peak ]] && peak=$r && echo $peak > $D/peak; sleep 0.01; done ) & sampler=$!
ok=0; fail=0; loads=()
for i in $(seq 0 29); do
  m=lm-$(echo a b c | cut -d' ' -f$((i % 3 + 1)))
  code=$(curl -s -D $D/h -o $D/body -w '%{http_code}' 127.0.0.1:$port/v1/chat/completions -H 'content-type: application/json' \
    -d '{"model":"'$m'","max_tokens":8,"messages":[{"role":"user","content":"Call me Ishmael"}]}')
  if [[ $code == 200 ]]; then ok=$((ok + 1)); else fail=$((fail + 1)); echo "request $i ($m): $code $(cat $D/body)"; fi
  l=$(awk 'tolower($1) == "x-edgeinfer-load-ms:" {print $2}' $D/h | tr -d '\r'); [[ -n $l ]] && loads+=($l)
done
loaded=$(curl -s 127.0.0.1:$port/v1/models | grep -o '"loaded":true' | wc -l)
sleep 3 # the keep-alive (1 s) runs out: every model unloads
baseline=$(rss)
after=$(curl -s 127.0.0.1:$port/v1/models | grep -o '"loaded":true' | wc -l)
kill $sampler 2>/dev/null; peak=$(cat $D/peak)
stop
echo "requests: $ok answered 200, $fail failed; ${#loads[@]} loaded their model (ms: ${loads[*]}); loaded after the last: $loaded, 3 s later: $after"
echo "RSS: peak $(mib $peak); baseline (no model loaded) $(mib $baseline); peak - baseline $(mib $((peak - baseline))) = $(awk -v p=$((peak - baseline)) -v b=$budget 'BEGIN {printf "%.0f", 100 * p / b}')% of the budget"
grep -c 'model unloaded' $D/serve.log | sed 's/^/unloads logged: /'
[[ $fail == 0 ]]
