#!/usr/bin/env bash
# `make chat`: the copilot in this terminal, no browser needed. The sandbox CRM + identity
# provider in the background (or the one already running), the embedded PostgreSQL
# migrated, then an interactive chat as the Agents Playground user (Alex Wilber) with the
# offline model. Ctrl-D or `quit` ends the chat and stops what this script started.
# CRM_KIND=dataverse talks to the sandbox's Dataverse face instead (scripts/crm_profile.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
mkdir -p .data
healthy() { "$PY" -c "import httpx,sys; sys.exit(0 if httpx.get('http://127.0.0.1:${SANDBOX_HTTP_PORT:-8765}/healthz', timeout=1).status_code == 200 else 1)" 2>/dev/null; }

SANDBOX_PID=""
if healthy; then
  echo "Using the sandbox already running on port ${SANDBOX_HTTP_PORT:-8765}."
else
  echo "Starting the sandbox CRM, identity provider and mailbox (log: .data/sandbox.log)…"
  "$PY" -m sandbox serve > .data/sandbox.log 2>&1 &
  SANDBOX_PID=$!
  trap '[ -n "$SANDBOX_PID" ] && kill "$SANDBOX_PID" 2>/dev/null; wait 2>/dev/null; echo "Stopped."' EXIT
  for _ in $(seq 1 200); do healthy && break; sleep 0.1; done
  healthy || { echo "The sandbox did not start; see .data/sandbox.log" >&2; exit 1; }
fi
. ./scripts/crm_profile.sh
crm_profile
"$PY" -m copilot db migrate
PY="$PY" ./scripts/knowledge.sh # the sandbox playbooks into knowledge search
echo
echo "Try: summarise Acme | my deals closing this quarter | log a call with Acme — discussed pricing, next step send proposal"
echo "     push the Acme renewal to Dec 15 and move it to negotiation | draft a follow-up to Maria at Acme about pricing"
"$PY" -m copilot chat --rep alex
