#!/usr/bin/env bash
# `make demo`: the whole local stack, then the copilot in a Teams client emulator.
#
#   sandbox CRM + identity provider + mailbox   python -m sandbox serve   (reused if already healthy)
#   embedded PostgreSQL, migrated               python -m copilot db migrate
#   bot dev server (local development mode)     python -m bot serve --port 3978
#   Microsoft 365 Agents Playground (msteams)   agentsplayground → http://localhost:56150
#
# Open the printed URL in a browser: you are "Alex Wilber" chatting with the copilot in
# Teams, with the offline model. Ctrl-C (or SIGTERM) stops everything this script started.
# Ports: BOT_PORT (3978), PLAYGROUND_PORT (56150; the Playground picks another if taken),
# SANDBOX_HTTP_PORT (8765). Logs go to .data/*.log. No browser? `make chat` is the same
# copilot in the terminal. CRM_KIND=dataverse: the sandbox's Dataverse face (scripts/crm_profile.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=.venv/bin/python
DATA=.data
BOT_PORT=${BOT_PORT:-3978}
PLAYGROUND_PORT=${PLAYGROUND_PORT:-56150}
SANDBOX_PORT=${SANDBOX_HTTP_PORT:-8765}
mkdir -p "$DATA/bin"

http_ok() { "$PY" -c "import httpx,sys; sys.exit(0 if httpx.get(sys.argv[1], timeout=1).status_code == 200 else 1)" "$1" 2>/dev/null; }

# --- processes: each in its own process group, stopped as a group ----------------------------
PIDS=()
NAMES=()
LOGS=()
start() { # start NAME LOG COMMAND...
  local name=$1 log=$2
  shift 2
  set -m # job control: the background job gets its own process group (pgid = its pid)
  "$@" >"$log" 2>&1 &
  local pid=$!
  set +m
  PIDS+=("$pid")
  NAMES+=("$name")
  LOGS+=("$log")
}
alive() { kill -0 "$1" 2>/dev/null; }           # the process itself
group_alive() { kill -0 -- "-$1" 2>/dev/null; } # anything left in its process group
cleanup() {
  trap - INT TERM EXIT
  if [ ${#PIDS[@]} -gt 0 ]; then
    echo
    echo "Stopping ${NAMES[*]}…"
    local i pid
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM -- "-${PIDS[i]}" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
      for _ in $(seq 1 100); do group_alive "$pid" || break; sleep 0.1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    echo "Stopped."
  fi
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT
fail() { # fail INDEX MESSAGE
  echo "$2 Last lines of ${LOGS[$1]}:" >&2
  tail -n 20 "${LOGS[$1]}" >&2 || true
  exit 1
}
wait_for() { # wait_for INDEX SECONDS CHECK...: poll CHECK while the process lives
  local index=$1 seconds=$2
  shift 2
  for _ in $(seq 1 $((seconds * 10))); do
    "$@" && return 0
    alive "${PIDS[index]}" || fail "$index" "The ${NAMES[index]} exited."
    sleep 0.1
  done
  fail "$index" "The ${NAMES[index]} did not come up within ${seconds} s."
}

# --- the sandbox ------------------------------------------------------------------------------
if http_ok "http://127.0.0.1:$SANDBOX_PORT/healthz"; then
  echo "Using the sandbox already running on port $SANDBOX_PORT."
else
  echo "Starting the sandbox CRM, identity provider and mailbox (log: $DATA/sandbox.log)…"
  start "sandbox" "$DATA/sandbox.log" "$PY" -m sandbox serve
  wait_for $((${#PIDS[@]} - 1)) 30 http_ok "http://127.0.0.1:$SANDBOX_PORT/healthz"
fi

. ./scripts/crm_profile.sh
crm_profile
# --- the database -----------------------------------------------------------------------------
"$PY" -m copilot db migrate
PY="$PY" ./scripts/knowledge.sh # the sandbox playbooks into knowledge search

# --- the bot dev server -----------------------------------------------------------------------
if http_ok "http://127.0.0.1:$BOT_PORT/api/health"; then
  echo "Port $BOT_PORT is taken by another bot (an earlier \`make demo\`?). Stop it or set BOT_PORT." >&2
  exit 1
fi
echo "Starting the bot dev server on port $BOT_PORT (log: $DATA/bot.log)…"
# Local development mode: no app credentials, so the Playground (which has no SSO) can talk to it.
start "bot dev server" "$DATA/bot.log" env -u MicrosoftAppId -u MicrosoftAppPassword \
  "$PY" -m bot serve --port "$BOT_PORT"
wait_for $((${#PIDS[@]} - 1)) 90 http_ok "http://127.0.0.1:$BOT_PORT/api/health"

# --- the Agents Playground --------------------------------------------------------------------
# It opens a browser at start and exits if it cannot: this xdg-open hands the URL to the real
# one when there is a desktop, and otherwise does nothing (the URL is printed below).
REAL_XDG_OPEN=$(command -v xdg-open || true)
cat >"$DATA/bin/xdg-open" <<EOF
#!/bin/sh
# Written by scripts/demo.sh for the Agents Playground; see there.
if [ -n "\${DISPLAY:-}\${WAYLAND_DISPLAY:-}" ] && [ -n "$REAL_XDG_OPEN" ]; then
  "$REAL_XDG_OPEN" "\$@" >/dev/null 2>&1 || true
fi
exit 0
EOF
chmod +x "$DATA/bin/xdg-open"
echo "Starting the Microsoft 365 Agents Playground (log: $DATA/playground.log)…"
: >"$DATA/playground.log"
start "Agents Playground" "$DATA/playground.log" \
  env PATH="$ROOT/$DATA/bin:$ROOT/node_modules/.bin:$PATH" \
  M365_AGENTS_PLAYGROUND_LOGFILE="$ROOT/$DATA/playground-internal.log" \
  agentsplayground -e "http://127.0.0.1:$BOT_PORT/api/messages" -c msteams \
  -p "$PLAYGROUND_PORT" --disable-telemetry
listening() { grep -Eo 'Listening on [0-9]+' "$DATA/playground.log" >/dev/null; }
PLAYGROUND=$((${#PIDS[@]} - 1))
wait_for "$PLAYGROUND" 60 listening
PORT=$(grep -Eo 'Listening on [0-9]+' "$DATA/playground.log" | head -n 1 | grep -Eo '[0-9]+$')
wait_for "$PLAYGROUND" 30 http_ok "http://127.0.0.1:$PORT/"

cat <<EOF

  The copilot is running in the Microsoft 365 Agents Playground, a Teams client emulator.
  Open  http://localhost:$PORT  in your browser: you are Alex Wilber (West-territory rep).

  Type, for example:
    summarise Acme
    my deals closing this quarter
    log a call with Acme — discussed pricing, next step send proposal
        → an approval card: Approve, Edit… (change the fields, then "Edit and approve") or Reject… (with a reason)
    push the Acme renewal to Dec 15 and move it to negotiation
    draft a follow-up to Maria at Acme about pricing     (saved to drafts, never sent)
    start over                                           (a new conversation)

  Logs: $DATA/bot.log, $DATA/playground.log, $DATA/sandbox.log.   Ctrl-C stops everything.
EOF

# --- run until Ctrl-C, or until one of them stops -----------------------------------------------
while true; do
  for i in "${!PIDS[@]}"; do
    alive "${PIDS[i]}" || fail "$i" "The ${NAMES[i]} stopped unexpectedly."
  done
  sleep 1
done
