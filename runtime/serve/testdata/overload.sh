#!/bin/bash
# overload.sh: fail-fast admission before, during and after a burst, as a
# user sees it with curl. edgeinfer serve runs the tiny model; the request
# is a short chat turn (max_tokens 32) with a 100 ms TTFT objective and
# fail_fast. 20 sequential requests, then 800 sent 200 at a time, then the
# same request alone, timed from the burst's end (and again 2, 5 and 10 s
# later). It prints each phase's admitted and refused counts with curl's
# end-to-end times (n, p50, p99: curl's own start-up among 200 concurrent
# processes is in them) and when the first request after the burst was
# admitted. Needs curl, bc and Go; run it on an otherwise idle machine.
set -u
cd "$(dirname "$0")/../../.."
D=$(mktemp -d); trap 'rm -rf $D' EXIT
go build -o $D/edgeinfer ./runtime/cmd/edgeinfer || exit 1
$D/edgeinfer model import --hf examples/tinylm --out $D/tiny >/dev/null || exit 1
port=$((20000 + RANDOM % 20000))
$D/edgeinfer serve --model $D/tiny --addr 127.0.0.1:$port > $D/serve.log 2>&1 & pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf $D' EXIT
for i in $(seq 1 50); do curl -s 127.0.0.1:$port/ready >/dev/null 2>&1 && break; sleep 0.2; done
export port
req() { curl -s -o /dev/null -w '%{http_code} %{time_total}\n' 127.0.0.1:$port/v1/chat/completions -H 'content-type: application/json' \
  -d '{"model":"tinylm","max_tokens":32,"messages":[{"role":"user","content":"Call me Ishmael. Some years ago"}],"edgeinfer":{"class":"interactive","ttft_ms":100,"fail_fast":true}}'; }
export -f req
for i in $(seq 1 20); do req; done > $D/before.txt
seq 1 800 | xargs -P 200 -I{} bash -c req > $D/burst.txt
end=$(date +%s.%N)
first=""
for i in $(seq 1 60); do
  r=$(req); now=$(date +%s.%N); echo "$(echo "$now - $end" | bc) $r" >> $D/after.txt
  [[ ${r%% *} == 200 && -z $first ]] && first=$(echo "$now - $end" | bc)
  [[ -n $first ]] && break
done
for t in 2 5 10; do sleep $t; r=$(req); echo "+later $r" >> $D/after.txt; done
pct() { sort -n | awk '{a[NR]=$1} END {p50=a[int(NR*0.5+0.5)]; p99=a[int(NR*0.99+0.5)]; if (p99=="") p99=a[NR]; printf "n=%d p50=%.1fms p99=%.1fms max=%.1fms", NR, p50*1000, p99*1000, a[NR]*1000}'; }
echo "before: $(grep -c '^200' $D/before.txt)/20 admitted; e2e $(awk '$1==200{print $2}' $D/before.txt | pct)"
echo "burst: $(grep -c '^200' $D/burst.txt) admitted (e2e $(awk '$1==200{print $2}' $D/burst.txt | pct)); $(grep -c '^429' $D/burst.txt) refused (e2e $(awk '$1==429{print $2}' $D/burst.txt | pct)); other: $(grep -vc '^\(200\|429\)' $D/burst.txt)"
echo "after the burst: first admitted at +${first:-never} s after the burst's end; requests: $(cat $D/after.txt | tr '\n' ';')"
