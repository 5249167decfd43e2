"""Azure Functions entry point (Python v2 model): registers the blueprints in ``functions/``.

* ``health``       GET  /api/health        liveness
* ``messages``     POST /api/messages      Bot Framework webhook: authenticate, enqueue (202)
* ``turns``        queue COPILOT_TURN_QUEUE          run one turn, reply via the Bot Connector
* ``turns_poison`` queue COPILOT_TURN_QUEUE-poison   tell the rep a turn finally failed
* ``retention``    timer 03:30 daily                 expire idle threads, prune checkpoints
* ``audit_seal``   timer every 5 minutes             verify the audit log, anchor its head
* ``briefs``       timer every 5 minutes             post opted-in reps' meeting prep briefs, once
* ``digest``       timer every 15 minutes            post opted-in reps' daily digests, once a day
* ``followthrough`` timer every 5 minutes            after a customer meeting ends, "How did it go?", once
* ``doctor``       GET  /api/doctor (master key)     the preflight's report, run where the data is
"""

import azure.functions as func

from functions.audit_seal import bp as audit_seal_bp
from functions.briefs import bp as briefs_bp
from functions.digest import bp as digest_bp
from functions.doctor_http import bp as doctor_bp
from functions.followthrough import bp as followthrough_bp
from functions.health import bp as health_bp
from functions.messages import bp as messages_bp
from functions.retention import bp as retention_bp
from functions.turns import bp as turns_bp

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)
for blueprint in (
    health_bp,
    messages_bp,
    turns_bp,
    retention_bp,
    audit_seal_bp,
    briefs_bp,
    digest_bp,
    followthrough_bp,
    doctor_bp,
):
    app.register_functions(blueprint)
