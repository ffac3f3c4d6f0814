#!/usr/bin/env bash
# CTest entry for the kvad pull tests (tests/hub/*.py):
#   run_pytest.sh KVAD_BINARY pull|interop [pytest args...]
# pull:    test_pull.py, the loopback Hub and kvad alone (stdlib + pytest).
# interop: test_interop.py, which also needs the official huggingface_hub
#          client (pinned in scripts/setup's venv, ${KVAD_HOME:-~/.cache/kvad}/venv).
# Python: $KVAD_PYTHON, else that venv's, else Debian's /usr/bin/python3.
# Exits 77 (CTest: skipped) with a message when the packages are missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KVAD_BINARY="$1"; [ "${KVAD_BINARY#/}" != "$KVAD_BINARY" ] || KVAD_BINARY="$PWD/$KVAD_BINARY"
export KVAD_BINARY
suite="$2"
shift 2
venv_py="${KVAD_HOME:-$HOME/.cache/kvad}/venv/bin/python"
case "$suite" in
  pull) file=test_pull.py; need="import pytest" ;;
  interop) file=test_interop.py; need="import pytest, huggingface_hub" ;;
  *) echo "run_pytest.sh: unknown suite '$suite' (pull or interop)" >&2; exit 2 ;;
esac
py=""
for cand in "${KVAD_PYTHON:-}" "$venv_py" /usr/bin/python3; do
  if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c "$need" 2>/dev/null; then py="$cand"; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no Python with '${need#import }' (tried \$KVAD_PYTHON, $venv_py, /usr/bin/python3; run scripts/setup)"
  exit 77
fi
cd "$here"
exec "$py" -m pytest -v -p no:cacheprovider "$@" "$file"
