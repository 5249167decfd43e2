"""Azure Functions entry point (Python v2 model): registers the blueprints in ``functions/``."""

import azure.functions as func

from functions.health import bp as health_bp

app = func.FunctionApp()
app.register_functions(health_bp)
