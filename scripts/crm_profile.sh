# Sourced by scripts/demo.sh and scripts/chat.sh once the sandbox is up: the CRM profile.
#
#   CRM_KIND=reference (default)  the sandbox CRM's own MCP tools
#   CRM_KIND=dataverse            Dynamics 365 Sales on Dataverse: the sandbox's Dataverse face,
#                                 CRM_URL = its org URL and CRM_CA_BUNDLE = its CA unless set
#
# `make demo CRM_KIND=dataverse` passes the variable through (make exports command-line variables).
crm_profile() {
  case "${CRM_KIND:-reference}" in
    reference) ;;
    dataverse)
      export CRM_KIND
      if [ -z "${CRM_URL:-}" ]; then
        CRM_URL=$("$PY" -c "from sandbox.config import SandboxSettings; print(SandboxSettings().org_url)")
        export CRM_URL
      fi
      if [ -z "${CRM_CA_BUNDLE:-}" ]; then
        CRM_CA_BUNDLE=$("$PY" -c "from sandbox.config import SandboxSettings; print(SandboxSettings().ca_cert_path)")
        export CRM_CA_BUNDLE
      fi
      echo "CRM: Dynamics 365 Sales on Dataverse at $CRM_URL (reads: its MCP server; writes: its Web API)."
      ;;
    *)
      echo "CRM_KIND must be 'reference' or 'dataverse', not '$CRM_KIND'." >&2
      exit 2
      ;;
  esac
}
