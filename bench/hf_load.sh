#!/bin/sh
# Whole-process load time of an HF checkpoint with --quant: the
# first load (quantizing into the quantize-once cache), the cached load, and
# the plain-GGUF load of the cache file itself (the same model as a GGUF),
# each the median of N runs of `kvad run -n 1`: wall seconds and CPU seconds
# (user + system, which a busy machine disturbs less), from /usr/bin/time.
#
#   bench/hf_load.sh [KVAD] [REPO] [QUANT] [N]
#
# defaults: build/kvad HuggingFaceTB/SmolLM2-135M-Instruct q8_0 5, with the
# HF test cache that scripts/setup makes (HF_HUB_CACHE=$KVAD_HOME/hf-cache,
# offline). The cache goes to a temporary KVAD_HOME (removed afterwards), so
# every "first load" really quantizes.
set -eu
KVAD=${1:-build/kvad}
REPO=${2:-HuggingFaceTB/SmolLM2-135M-Instruct}
QUANT=${3:-q8_0}
N=${4:-5}
HOME_KVAD=${KVAD_HOME:-$HOME/.cache/kvad}
export HF_HUB_CACHE=${HF_HUB_CACHE:-$HOME_KVAD/hf-cache} HF_HUB_OFFLINE=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export KVAD_HOME=$TMP

one() {  # "wall cpu" seconds of one run of "$@"
  /usr/bin/time -f "%e %U %S" -o "$TMP/t" "$@" -p "Hi" --raw -n 1 --temp 0 >/dev/null 2>"$TMP/err" || {
    cat "$TMP/err" >&2
    exit 1
  }
  awk '{printf "%.2f %.2f\n", $1, $2 + $3}' "$TMP/t"
}
# "median-wall | median-cpu" of lines "wall cpu"
median() {
  cat >"$TMP/m"
  w=$(cut -d' ' -f1 "$TMP/m" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  c=$(cut -d' ' -f2 "$TMP/m" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "$w | $c"
}

first=$(for i in $(seq "$N"); do rm -rf "$TMP/cache"; one "$KVAD" run --model "$REPO" --quant "$QUANT"; done | median)
cached=$(for i in $(seq "$N"); do one "$KVAD" run --model "$REPO" --quant "$QUANT"; done | median)
FILE=$(ls "$TMP"/cache/*.gguf)
gguf=$(for i in $(seq "$N"); do one "$KVAD" run --model "$FILE"; done | median)
echo "| $REPO --quant $QUANT (median of $N, whole process, kvad run -n 1) | wall s | CPU s |"
echo "|---|---|---|"
echo "| first load (quantizing) | $first |"
echo "| cached load | $cached |"
echo "| the cache file as a plain GGUF (kvad run --model FILE.gguf) | $gguf |"
echo "$cached $gguf" | awk -F'[ |]+' '{ printf "cached / GGUF: wall %.2f, CPU %.2f\n", $1 / $3, $2 / $4 }'
