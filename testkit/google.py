"""A loopback FCM for the tests of the ``fcm`` kind: a service account, Google's token
endpoint checking the assertion's signature, and the send endpoint's answers."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from testkit.servers import Reply, Request

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EMAIL = "push@demo-project.iam.gserviceaccount.com"
PEM = KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
ACCOUNT = json.dumps({"type": "service_account", "client_email": EMAIL, "private_key": PEM})
SEND = "/v1/projects/demo-project/messages:send"
DEVICE = "device-token-abc123"


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Google:
    """The token endpoint: checks the assertion's signature and claims, hands out tokens."""

    def __init__(self, server_url: str = "", lifetime_s: int = 3600) -> None:
        self.issued: list[str] = []
        self.lifetime_s = lifetime_s
        self.audience = server_url

    def token(self, request: Request) -> Reply:
        form = {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
        assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        head, claims, signature = form["assertion"].split(".")
        try:
            KEY.public_key().verify(
                unb64(signature), f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except InvalidSignature:
            return Reply(400, {}, b'{"error": "invalid_grant"}')
        said = json.loads(unb64(claims))
        assert json.loads(unb64(head)) == {"alg": "RS256", "typ": "JWT"}
        assert said["iss"] == EMAIL and said["aud"] == self.audience
        assert said["scope"] == "https://www.googleapis.com/auth/firebase.messaging"
        assert said["exp"] - said["iat"] == 3600
        token = f"ya29.token-{len(self.issued)}"
        self.issued.append(token)
        body = {"access_token": token, "expires_in": self.lifetime_s, "token_type": "Bearer"}
        return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())


def fcm_send(google: Google, answer: Reply | None = None) -> Callable[[Request], Reply]:
    def send(request: Request) -> Reply:
        if request.headers.get("authorization") != f"Bearer {google.issued[-1]}":
            return error(401, "UNAUTHENTICATED", None, "invalid token")
        if answer is not None:
            return answer
        message = request.json()["message"]
        assert message["token"] == DEVICE
        body = {"name": "projects/demo-project/messages/0:1234"}
        return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    return send


def error(status: int, state: str, code: str | None, text: str, **headers: str) -> Reply:
    error: dict[str, Any] = {"code": status, "message": text, "status": state}
    if code:
        error["details"] = [
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}
        ]
    body = json.dumps({"error": error}).encode()
    return Reply(status, {"Content-Type": "application/json", **headers}, body)
