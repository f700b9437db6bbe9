#!/usr/bin/env bash
# demo.sh OUTDIR — the main job: build the CLI, import the tiny Llama trained
# on Moby-Dick (examples/tinylm) as a bundle, stream one answer, then run the
# ~70 s `demo` benchmark profile (baseline, ramp, burst, recovery) and a
# concurrency sweep doubling past the batch to the knee; writes OUTDIR/report.{json,md,html}.
set -euo pipefail
OUT=${1:-out/demo}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT"
GO=${GO:-go}

echo "== building edgeinfer"
"$GO" build -o "$OUT/edgeinfer" ./runtime/cmd/edgeinfer
EI="$OUT/edgeinfer"

MODEL="$OUT/tinylm"
CORPUS=()

if [[ -f examples/tinylm/config.json && -f examples/tinylm/model.safetensors ]]; then
	echo "== importing the tiny trained model (examples/tinylm) into $MODEL"
	rm -rf "$MODEL"
	"$EI" model import --hf examples/tinylm --out "$MODEL"
	if [[ -f examples/tinylm/testdata/heldout.txt ]]; then
		CORPUS=(--corpus examples/tinylm/testdata/heldout.txt)
	fi
	PROMPTED=1
else
	echo "== examples/tinylm has no checkpoint (config.json + model.safetensors): using the"
	echo "   synthetic tiny-test preset instead (random weights, no tokenizer, synthetic prompts)"
	MODEL="$OUT/tiny-test"
	rm -rf "$MODEL"
	"$EI" model build --preset tiny-test --out "$MODEL"
	PROMPTED=0
fi

if [[ $PROMPTED == 1 ]]; then
	echo "== one answer, streamed"
	# Greedy (reproducible) with a mild repetition penalty: a 4M-parameter
	# model left fully greedy loops on its likeliest phrase.
	"$EI" generate --model "$MODEL" --prompt "Call me Ishmael" --max-tokens 60 --repetition-penalty 1.2
fi

echo "== benchmark: demo profile (~100 s: warm-up, 4 phases, a sweep doubling past the batch to the knee)"
"$EI" bench --profile demo --sweep --model "$MODEL" --out "$OUT" "${CORPUS[@]}"
