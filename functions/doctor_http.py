"""``GET /api/doctor``: the preflight (``python -m copilot doctor``) run inside the Function App.

The data stores are private and Flex Consumption has no console, so the app itself is where
every check can reach what it checks. The route takes the host's master (admin) key only
(``AuthLevel.ADMIN``: ``x-functions-key: <master key>``), never a function key. Its answer is
the doctor's report and nothing else: check names, pass/fail, what was found (settings, counts,
endpoints), the setting at fault and the fix. No CRM token is given to it, so nothing is read as
a rep (``crm.tools`` lists tools only with a rep's token and is skipped here).

200 when every check passed or was skipped, 503 when one failed. The checks import the whole app,
so they are imported on the first call, not when the webhook's worker starts.
"""

from __future__ import annotations

import os

import azure.functions as func

bp = func.Blueprint()


@bp.function_name("doctor")
@bp.route(route="doctor", methods=["GET"], auth_level=func.AuthLevel.ADMIN)
async def doctor(req: func.HttpRequest) -> func.HttpResponse:
    """Run every check against this app's settings and answer with the report (JSON)."""
    from copilot.doctor.framework import DoctorContext, run_checks
    from functions.doctor import all_checks

    ctx = DoctorContext(environ=dict(os.environ), crm_token=None)
    report = await run_checks(all_checks(), ctx, lambda result: None)
    return func.HttpResponse(
        report.model_dump_json(), status_code=200 if report.ok else 503, mimetype="application/json"
    )
