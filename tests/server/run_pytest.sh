#!/usr/bin/env bash
# CTest entry for the kvad serve tests (tests/server/*.py):
#   run_pytest.sh KVAD_BINARY BUILD_DIR [pytest args...]
# Uses the venv scripts/setup makes (${KVAD_HOME:-~/.cache/kvad}/venv, with the
# pinned `openai` package and Debian's pytest and selenium), or $KVAD_PYTHON.
# Exits 77 (CTest: skipped) with a message when that Python is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export KVAD_BINARY="$1" KVAD_BUILD_DIR="$2"
shift 2
py="${KVAD_PYTHON:-${KVAD_HOME:-$HOME/.cache/kvad}/venv/bin/python}"
if [ ! -x "$py" ] || ! "$py" -c 'import openai, pytest' 2>/dev/null; then
  echo "SKIP: no Python with the openai and pytest packages at $py (run scripts/setup)"
  exit 77
fi
cd "$here"
exec "$py" -m pytest -x -v -p no:cacheprovider "$@" .
