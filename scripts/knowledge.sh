#!/usr/bin/env bash
# The sandbox's SharePoint-like document libraries into knowledge search: for each tenant,
# its manager's delegated Graph token (Sites.Read.All) lists the drive, and each file keeps
# its permissions as its access list. Unchanged files are skipped, so re-running is cheap.
# Used by `make demo` and `make chat` after `db migrate`, with the sandbox running.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LISTING="http://127.0.0.1:${SANDBOX_HTTP_PORT:-8765}/v1.0/sites/root/drive/root/children"
for handle in nestor taylor; do
  tenant=$("$PY" -m sandbox users | "$PY" -c \
    "import json, sys; print(next(u['tenant'] for u in json.load(sys.stdin) if u['handle'] == sys.argv[1]))" "$handle")
  KNOWLEDGE_GRAPH_TOKEN=$("$PY" -m sandbox token --rep "$handle" --scope Sites.Read.All) \
    "$PY" -m copilot knowledge ingest "$LISTING" --tenant "$tenant" --bearer-env KNOWLEDGE_GRAPH_TOKEN
done
