#!/usr/bin/env bash
# kvad run / bench split over MPI ranks (--pipeline-parallel-size) against
# one process, and the bad inputs of a split run: test_pipeline_cli KVAD
# MAKE_RANDOM_GGUF. The greedy text of 32 tokens under mpirun with 2 and 3
# ranks must equal one process's, byte for byte (the split computes the same
# f32 values), on random-weight tiny llama and gemma3 GGUFs
# (make_random_gguf) and on SmolLM2-135M when the store has it. Every
# mpirun is under `timeout`: a hang fails the test. Exits 77 (skipped) when
# mpirun is absent.
set -uo pipefail
kvad=$1 make_gguf=$2
here=$(cd "$(dirname "$0")" && pwd)
mpi="$here/../dist/run_mpi.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
"$kvad" run --help | grep -q -- --pipeline-parallel-size || { echo "kvad has no --pipeline-parallel-size"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$make_gguf" tiny "$tmp/tiny.gguf" >/dev/null
"$make_gguf" tiny-gemma3 "$tmp/gemma3.gguf" >/dev/null
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# run_same NAME NP MODEL [FLAGS...]: kvad run under NP ranks prints what one process prints.
run_same() {
  local name=$1 np=$2 model=$3; shift 3
  local args=(run -m "$model" --raw -p "The capital of France is" -n 32 --temp 0 -t 1 -c 128)
  "$kvad" "${args[@]}" >"$tmp/one.out" 2>"$tmp/one.err" || { bad "$name: one process failed: $(tail -1 "$tmp/one.err")"; return; }
  timeout 300 "$mpi" "$np" "$kvad" "${args[@]}" -pp "$np" "$@" >"$tmp/pp.out" 2>"$tmp/pp.err" \
    || { bad "$name: -pp $np failed (status $?): $(tail -3 "$tmp/pp.err")"; return; }
  cmp -s "$tmp/one.out" "$tmp/pp.out" || { bad "$name: -pp $np printed other text"; diff "$tmp/one.out" "$tmp/pp.out" | head -5; }
  [ -s "$tmp/pp.out" ] || bad "$name: -pp $np printed nothing"
  local n
  n=$(grep -c '^\[kvad\] load' "$tmp/pp.err")
  [ "$n" = 1 ] || bad "$name: -pp $np: $n ranks printed the summary (only rank 0 should)"
  echo "ok: $name -pp $np $*"
}

# refused NP PATTERN ARGS...: non-zero from every rank, PATTERN on stderr once.
refused() {
  local np=$1 pat=$2; shift 2
  local status
  if [ "$np" = 0 ]; then timeout 120 "$kvad" "$@" >"$tmp/o" 2>"$tmp/e"; status=$?
  else timeout 120 "$mpi" "$np" "$kvad" "$@" >"$tmp/o" 2>"$tmp/e"; status=$?; fi
  [ "$status" = 124 ] && { bad "hung: np $np $*"; return; }
  [ "$status" != 0 ] || bad "status 0 for np $np $*"
  local n
  n=$(grep -c -- "$pat" "$tmp/e")
  [ "$n" = 1 ] || { bad "np $np $*: '$pat' printed $n times:"; cat "$tmp/e"; }
  [ -s "$tmp/o" ] && bad "np $np $*: printed on stdout"
  echo "ok: refused np $np $* ($pat)"
}

run_same tiny-llama 2 "$tmp/tiny.gguf"
run_same tiny-gemma3 2 "$tmp/gemma3.gguf"
run_same tiny-gemma3 3 "$tmp/gemma3.gguf" --layer-split 1,3,2
smol="${KVAD_HOME:-$HOME/.cache/kvad}/models/smollm2-135m.gguf"
if [ -f "$smol" ]; then
  run_same smollm2 2 "$smol"
  run_same smollm2 3 "$smol"
else
  echo "note: $smol absent, SmolLM2 not checked"
fi

refused 3 "3 pipeline stages for a model of 2 layers" run -m "$tmp/tiny.gguf" -p hi -pp 3 -t 1
refused 2 "world size 2 is not tp × pp = 1" run -m "$tmp/tiny.gguf" -p hi -t 1
refused 3 "world size 3 is not tp × pp = 2" bench -m "$tmp/tiny.gguf" -pp 2 -t 1
refused 0 "world size 1 is not tp × pp = 2" run -m "$tmp/tiny.gguf" -p hi -pp 2 -t 1
refused 2 "tensor parallel is not supported yet" run -m "$tmp/tiny.gguf" -p hi -tp 2 -t 1
refused 2 "adds up to 3 layers, the model has 6" run -m "$tmp/gemma3.gguf" -p hi -pp 2 --layer-split 1,2 -t 1
refused 2 "kvad serve does not run on several ranks yet" serve -m "$tmp/tiny.gguf" --port 0
refused 2 "kvad: error:" run -m "$tmp/missing.gguf" -p hi -pp 2 -t 1  # every rank fails to load; rank 0 says it once

# bench under pp: runs, and prints the traffic per decoded token.
if timeout 300 "$mpi" 2 "$kvad" bench -m "$tmp/gemma3.gguf" -p 16 -n 8 -r 1 -pp 2 -t 1 >"$tmp/b.out" 2>"$tmp/b.err"; then
  grep -q "pipeline traffic per decoded token" "$tmp/b.out" || bad "bench -pp 2 printed no traffic"
  echo "ok: bench -pp 2"
else
  bad "bench -pp 2 failed: $(tail -3 "$tmp/b.err")"
fi
exit $fail
