"""A loopback Twilio for the tests of the ``twilio`` kind: an account, its token, and the
create-message endpoint (Basic auth, the form) with its error answers."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs

from testkit.servers import Reply, Request

ACCOUNT = "AC" + "0123456789abcdef" * 2
TOKEN = "twilio-auth-token-0001"
PATH = f"/2010-04-01/Accounts/{ACCOUNT}/Messages.json"


def authorized(request: Request) -> bool:
    expected = base64.b64encode(f"{ACCOUNT}:{TOKEN}".encode()).decode()
    return request.headers.get("authorization") == f"Basic {expected}"


def twilio(request: Request) -> Reply:
    """Twilio's create-message endpoint, as documented: 201 with the message resource."""
    if not authorized(request):
        return error(401, 20003, "Authenticate")
    form = {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
    if request.headers.get("content-type") != "application/x-www-form-urlencoded":
        return error(400, 21000, "not a form")
    if not form.get("To", "").startswith("+"):
        return error(400, 21211, f"The 'To' number {form.get('To')} is not a valid phone number.")
    body = {"sid": "SM" + "f" * 32, "status": "queued", "to": form["To"], "body": form["Body"]}
    return Reply(201, {"Content-Type": "application/json"}, json.dumps(body).encode())


def error(status: int, code: int, message: str, **headers: str) -> Reply:
    body = {"code": code, "message": message, "status": status}
    return Reply(status, {"Content-Type": "application/json", **headers}, json.dumps(body).encode())
