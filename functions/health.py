"""``GET /api/health``: liveness for the Function App (no secrets, no database round trip)."""

from __future__ import annotations

import json

import azure.functions as func

bp = func.Blueprint()


@bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def health(req: func.HttpRequest) -> func.HttpResponse:
    """Report that the app is up."""
    return func.HttpResponse(json.dumps({"status": "ok"}), mimetype="application/json")
