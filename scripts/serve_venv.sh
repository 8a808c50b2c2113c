#!/bin/sh
# A venv under the build tree with the official openai client (PyPI) for ctest's serve_openai
# (tests/serve/test_openai.py), which is skipped without it. Debian has no package for it.
# Usage: scripts/serve_venv.sh BUILD_DIR   (makes BUILD_DIR/serve-venv; 1 when pip cannot)
set -u
venv=$1/serve-venv
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import openai" 2>/dev/null; then
  exit 0
fi
python3 -m venv "$venv" >/dev/null 2>&1 &&
  "$venv/bin/python" -m pip install -q --disable-pip-version-check openai >/dev/null 2>&1 &&
  "$venv/bin/python" -c "import openai" 2>/dev/null
