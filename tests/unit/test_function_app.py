"""The Azure Functions app imports and its functions answer when invoked directly."""

from __future__ import annotations

import json

import azure.functions as func


def test_function_app_registers_the_health_function():
    import function_app

    functions = {f.get_function_name(): f for f in function_app.app.get_functions()}
    assert "health" in functions
    response = functions["health"].get_user_function()(
        func.HttpRequest(method="GET", url="/api/health", body=b"", headers={})
    )
    assert response.status_code == 200
    assert json.loads(response.get_body()) == {"status": "ok"}
