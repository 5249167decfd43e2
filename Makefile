# The README names two targets: `make demo` (run the product locally) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup chromium faketime any-day demo chat test lint typecheck unit soak bench eval eval-generate clean \
	infra-check infra-bootstrap infra-entra-app infra-deploy infra-secrets infra-database infra-rotate infra-package infra-doctor infra-lock-anchors dataverse-check

$(STAMP): requirements.txt requirements-dev.txt package.json package-lock.json
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	# npm ci trips over optional platform-only packages missing from the lock (npm bug);
	# npm install honours the lock for everything it records.
	npm install --no-audit --no-fund --loglevel=error
	touch $(STAMP)

# checkov (the template checks in tests/infra) pins packages that conflict with the shared
# venv's, so it gets its own tools venv; tests/infra runs its checkov executable.
INFRA_VENV := .venv-infra
INFRA_STAMP := $(INFRA_VENV)/.installed
$(INFRA_STAMP): requirements-infra.txt
	test -x $(INFRA_VENV)/bin/python || $(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(INFRA_VENV)/bin/python -m pip install --quiet -r requirements-infra.txt
	touch $(INFRA_STAMP)

# The three installs are independent (the shared venv with npm's tools, the infra tools venv,
# Chromium), so they run side by side: on a fresh 2-core machine about 2¼ minutes, not 3½.
setup:
	@$(MAKE) --no-print-directory --jobs=3 $(STAMP) $(INFRA_STAMP) chromium faketime

# The Agents Playground end-to-end tests drive a system Chromium (`npx playwright install`
# cannot download browsers here). CI runs as root on Debian: install it when it is missing.
CHROMIUM ?= /usr/bin/chromium
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
chromium:
	@if [ -x "$(CHROMIUM)" ] || [ -n "$$CHROMIUM_PATH" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "warning: no $(CHROMIUM) and no apt-get: install Chromium and set CHROMIUM_PATH for the e2e tests" >&2; exit 0; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO=sudo; else \
	  echo "warning: no $(CHROMIUM): run 'sudo apt-get install -y chromium' for the e2e tests" >&2; exit 0; \
	fi; \
	echo "Installing Chromium (apt-get) for the Agents Playground tests…"; \
	$$SUDO env $(APT_INSTALL) >/dev/null || { \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	  $$SUDO env $(APT_INSTALL) >/dev/null; }

# The any-day guard (tests/any_day.py) replays the time-sensitive tests under a shifted clock
# with faketime (Debian's package); installed like Chromium when it is missing and we may.
faketime:
	@if command -v faketime >/dev/null 2>&1; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "warning: no faketime and no apt-get: install faketime for the any-day guard" >&2; exit 0; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO=sudo; else \
	  echo "warning: no faketime: run 'sudo apt-get install -y faketime' for the any-day guard" >&2; exit 0; \
	fi; \
	echo "Installing faketime (apt-get) for the any-day guard…"; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q faketime >/dev/null || { \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q faketime >/dev/null; }

# The whole local stack in a Teams client emulator (Agents Playground); see scripts/demo.sh.
demo: setup
	./scripts/demo.sh

# The same copilot in this terminal (no browser needed).
chat: setup
	./scripts/chat.sh

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: setup
	$(PY) -m mypy

# One pytest worker per core (pytest-xdist); each test file runs whole on one worker, so a
# module's services (its Playground, its database) start once. PYTEST_WORKERS=0 runs serially.
PYTEST_WORKERS ?= auto
test: setup lint typecheck
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile
	$(PY) -m tests.any_day

# The time-sensitive tests at a Sunday evening and a Monday early morning (UTC), or at AT.
any-day: setup
	$(PY) -m tests.any_day $(if $(AT),--at "$(AT)")

# The inner loop: the unit tests only (no services; well under a minute).
unit: setup
	$(PY) -m pytest tests/unit tests/infra -q -m "not integration"

# The adversarial proof suites at their full counts (CI runs them at reduced counts).
# Each suite prints "<suite>: tried N, failures M"; the lines collect in
# test-artifacts/adversarial/summary.txt. Takes a few hours on two cores.
soak: setup
	rm -f test-artifacts/adversarial/summary.txt
	COPILOT_SOAK=1 $(PY) -m pytest tests/adversarial -q -s
	@cat test-artifacts/adversarial/summary.txt

# What a turn and an Approve click cost, as ratios against bare LangChain measured in the
# same run (see README, "Benchmarks"). BENCH_ARGS="--quick" for a smoke run, "--json" for JSON;
# BENCH_REP is the sandbox rep it signs in as (its records are found in the CRM at run time).
# CRM_KIND=dataverse measures the dataverse profile (the sandbox's Dataverse face); make passes a
# command-line CRM_KIND to the command's environment, where the CLI reads its settings.
BENCH_REP ?= alex
bench: setup
	$(PY) -m bench run --rep $(BENCH_REP) $(BENCH_ARGS)

# How well the copilot answers: the held-out split through the real CopilotService, one table
# per model (COPILOT_MODEL and each COPILOT_FALLBACK_MODELS entry); exit 1 below a threshold
# stored with the dataset (see README, "Evals"). EVAL_ARGS="--model M", "--dataset dev", "--json".
# CRM_KIND=dataverse: the copilot on the sandbox's Dataverse face, with the *.dataverse.jsonl datasets
# (scripts/crm_profile.sh sets CRM_URL as for demo and chat; the eval's own sandbox replaces it).
eval: setup
	. ./scripts/crm_profile.sh && PY=$(PY) && crm_profile && \
	$(PY) -m evals --generate --check && \
	$(PY) -m evals --dataset heldout $(EVAL_ARGS)

# Rebuild evals/datasets/*.jsonl (CRM_KIND=dataverse: *.dataverse.jsonl) from a freshly seeded sandbox.
eval-generate: setup
	. ./scripts/crm_profile.sh && PY=$(PY) && crm_profile && $(PY) -m evals --generate

# --- Azure deployment (docs/ADMIN.md) -------------------------------------------------------
# The template checks: pycep parse, checkov, policy and template-to-code consistency.
infra-check: setup
	$(PY) -m pytest tests/infra -q

RESOURCE_GROUP ?=
PARAMETERS ?= infra/main.parameters.json
DEPLOYMENT ?= crm-copilot
VAULT ?=
SECRET ?=
APP_VERSION ?= 1.0.0
_require = @test -n "$($(1))" || { echo "error: set $(1)=... (docs/ADMIN.md)" >&2; exit 2; }

# Once per subscription and resource group, safe to run again: sign in (unless already), register
# the resource providers the template's resources need (Microsoft.App: the Flex Consumption subnet
# delegation), create the resource group, then (scripts/azure_setup.py) the bootstrap vault with
# the bot's client secret (BOT_CLIENT_SECRET or a hidden prompt; never a command-line argument)
# and infra/main.parameters.json from the example, filled from NAME=value variables named after
# the template's parameters. tests/infra checks the provider list against the template and runs
# the target with a fake az.
LOCATION ?=
BOOTSTRAP_VAULT ?=
INFRA_PROVIDERS := Microsoft.App Microsoft.Authorization Microsoft.BotService Microsoft.CognitiveServices \
	Microsoft.DBforPostgreSQL Microsoft.Insights Microsoft.KeyVault Microsoft.ManagedIdentity \
	Microsoft.Network Microsoft.OperationalInsights Microsoft.Storage Microsoft.Web
infra-bootstrap:
	$(call _require,RESOURCE_GROUP)
	$(call _require,LOCATION)
	$(call _require,BOOTSTRAP_VAULT)
	az account show --output none 2>/dev/null || az login --output none
	for ns in $(INFRA_PROVIDERS); do az provider register --namespace $$ns --wait --output none || exit 1; done
	az group create --name $(RESOURCE_GROUP) --location $(LOCATION) --output none
	$(PYTHON) scripts/azure_setup.py bootstrap --resource-group $(RESOURCE_GROUP) --location $(LOCATION) \
	  --vault $(BOOTSTRAP_VAULT) --parameters $(PARAMETERS)

# The app registration's redirect URI for the Bot Framework token service, its groups claim
# (security groups) and its delegated permissions (Graph; Dynamics CRM unless CRM_PERMISSIONS=other),
# added to what it has. Needs the app's owner or an Application Administrator; admin consent
# stays a portal step.
APP_ID ?=
CRM_PERMISSIONS ?= dataverse
infra-entra-app:
	$(call _require,APP_ID)
	$(PYTHON) scripts/azure_setup.py entra-app --app-id $(APP_ID) --crm $(CRM_PERMISSIONS)

# Provision (or upgrade) everything in infra/main.bicep into an existing resource group.
infra-deploy: infra-check
	$(call _require,RESOURCE_GROUP)
	az deployment group create --resource-group $(RESOURCE_GROUP) --name $(DEPLOYMENT) \
	  --template-file infra/main.bicep --parameters @$(PARAMETERS)
	az deployment group show --resource-group $(RESOURCE_GROUP) --name $(DEPLOYMENT) \
	  --query properties.outputs

# Generate the keys the vault must hold (only those missing; never overwrites).
infra-secrets: setup
	$(call _require,VAULT)
	PYTHONPATH=. $(PY) infra/vault_secrets.py --vault $(VAULT)

# The database, from a machine that reaches the server (the VNet, or adminIpAddress): the
# migration as the admins' group with an Entra token, the template's appRoleGrantSql in the
# postgres database, and the database-url secret. Reads the deployment's outputs; safe to rerun.
infra-database: setup
	$(call _require,RESOURCE_GROUP)
	$(PYTHON) scripts/azure_setup.py database --resource-group $(RESOURCE_GROUP) --deployment $(DEPLOYMENT) \
	  --python $(PY)

# Rotate one generated key (SECRET=audit-hmac-keys | token-encryption-key | trace-pseudonym-key).
infra-rotate: setup
	$(call _require,VAULT)
	$(call _require,SECRET)
	PYTHONPATH=. $(PY) infra/vault_secrets.py --vault $(VAULT) --rotate $(SECRET)

# The Teams app package from the deployment's outputs (MicrosoftAppId, BOT_DOMAIN, the publisher's
# name and links; bot/package.py refuses sample values such as Contoso in a tenant's package).
_output = $$(az deployment group show --resource-group $(RESOURCE_GROUP) --name $(DEPLOYMENT) \
	  --query properties.outputs.$(1).value --output tsv)
infra-package: setup
	$(call _require,RESOURCE_GROUP)
	MicrosoftAppId=$(call _output,MicrosoftAppId) BOT_DOMAIN=$(call _output,BOT_DOMAIN) \
	  PUBLISHER_NAME="$(call _output,PUBLISHER_NAME)" WEBSITE_URL=$(call _output,WEBSITE_URL) \
	  PRIVACY_URL=$(call _output,PRIVACY_URL) TERMS_URL=$(call _output,TERMS_URL) \
	  APP_VERSION=$(APP_VERSION) $(PY) -m bot package

# The preflight inside the Function App (where the private data stores are reachable): GET
# /api/doctor with the host's master key; prints the report, fails when a check failed.
infra-doctor:
	$(call _require,RESOURCE_GROUP)
	@app=$(call _output,functionAppName); \
	key=$$(az functionapp keys list --resource-group $(RESOURCE_GROUP) --name $$app --query masterKey --output tsv); \
	curl --silent --show-error --fail-with-body --header "x-functions-key: $$key" \
	  "https://$$(az functionapp show --resource-group $(RESOURCE_GROUP) --name $$app --query defaultHostName --output tsv)/api/doctor"

# Lock the audit anchors' retention policy: irreversible (the period can then only grow, and the
# container and the storage account cannot be deleted while anchors are held). ARM offers no
# declarative lock (it is a POST action on the policy), so this is a step, not a parameter.
infra-lock-anchors:
	$(call _require,RESOURCE_GROUP)
	@account=$(call _output,storageAccountName); container=$(call _output,auditAnchorContainer); \
	etag=$$(az storage container immutability-policy show --resource-group $(RESOURCE_GROUP) \
	  --account-name $$account --container-name $$container --query etag --output tsv); \
	az storage container immutability-policy lock --resource-group $(RESOURCE_GROUP) \
	  --account-name $$account --container-name $$container --if-match "$$etag" --output none

clean:
	rm -rf $(VENV) $(INFRA_VENV) node_modules .data

# The admin guide's "Connect Dynamics 365 Sales" commands and the doctor's Dataverse checks,
# against the sandbox's Dataverse emulator.
dataverse-check: setup
	$(PY) -m pytest tests/integration/test_doctor_dataverse.py -q --basetemp=$${BASETEMP:-/tmp/bt-dataverse-check}
