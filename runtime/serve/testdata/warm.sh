#!/bin/bash
# warm.sh: the first request after a restart, cold and warm. edgeinfer
# serve runs synthetic-110m (int4-b32) from a store; the request is a
# 1,000-token system prompt plus a short question (token ids on
# /v1/completions, streamed, 8 tokens out). Each round starts serve, sends
# the request, stops serve cleanly (SIGTERM) — cold with the prefix cache
# persisted nowhere (--no-prefix-persist), warm after a run that saved it
# (the same system prompt, another question). It prints each round's
# client-side time to the first streamed event, serve's own record of the
# request (its log line: TTFT and cached_tokens), and the median ratio
# warm ÷ cold. Needs curl and Go; run it on an otherwise idle machine.
#   runtime/serve/testdata/warm.sh [rounds]
set -u
cd "$(dirname "$0")/../../.."
rounds=${1:-3}
D=$(mktemp -d); trap 'rm -rf $D' EXIT
go build -o $D/edgeinfer ./runtime/cmd/edgeinfer || exit 1
$D/edgeinfer model build --preset synthetic-110m --scheme int4-b32 --out $D/b >/dev/null || exit 1
$D/edgeinfer models --store $D/models.db import $D/b >/dev/null 2>&1 || exit 1
sys=$(seq 1 1000 | awk '{printf "%s%d", (NR>1?",":""), ($1*7919)%30000+100}')
body() { echo "{\"model\":\"synthetic-110m\",\"max_tokens\":8,\"stream\":true,\"prompt\":[$sys,$1]}"; }
port=$((20000 + RANDOM % 20000))
# run FLAGS QUESTION: one serve from start to clean stop; prints the time
# to the first event (ms) and serve's request line.
run() {
  $D/edgeinfer serve --store $D/models.db --addr 127.0.0.1:$port --threads 2 -v $1 > $D/serve.log 2>&1 & local pid=$!
  for i in $(seq 1 100); do curl -s 127.0.0.1:$port/ready >/dev/null 2>&1 && break; sleep 0.1; done
  local first
  first=$(curl -sN 127.0.0.1:$port/v1/completions -H 'content-type: application/json' -d "$(body "$2")" -w '%{time_starttransfer}\n' -o /dev/null)
  kill -TERM $pid; wait $pid
  echo "$(echo "$first * 1000" | bc) $(grep -o 'msg=request .*' $D/serve.log | grep -o 'cached_tokens=[0-9]* tokens=[0-9]* ttft=[^ ]*')"
}
cold=(); warm=()
for r in $(seq 1 $rounds); do
  rm -rf $D/models.db.prefix
  c=$(run --no-prefix-persist "11,12,13,14,15,16,17,18"); cold+=("${c%% *}")
  echo "round $r cold: first event ${c%% *} ms; serve: ${c#* }"
  run "" "21,22,23,24,25,26,27,28" >/dev/null   # computes and, at its clean stop, saves the system prompt
  w=$(run "" "11,12,13,14,15,16,17,18"); warm+=("${w%% *}")
  echo "round $r warm: first event ${w%% *} ms; serve: ${w#* }"
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mc=$(med "${cold[@]}"); mw=$(med "${warm[@]}")
echo "median first event: cold $mc ms, warm $mw ms; warm ÷ cold $(echo "scale=3; $mw / $mc" | bc)"
