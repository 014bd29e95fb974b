"""The secret of nsqd's HTTP API with `--http-auth-required` (beyond nsqd): `Authorization: Bearer <secret>`.

Clients (nsqadmin, nsq_stat) take it from `--http-auth-secret`, else from `$NSQ_HTTP_AUTH_SECRET`, which keeps it
out of the process list; nsqd reads it with `bearer_secret`.
"""

from __future__ import annotations

import os

SECRET_ENV = "NSQ_HTTP_AUTH_SECRET"
SCHEME = "Bearer"


def secret_or_env(flag_value: str) -> str:
    """The secret given by flag, else the environment's ("" for none)."""
    return flag_value or os.environ.get(SECRET_ENV, "")


def bearer_headers(secret: str) -> dict[str, str]:
    """The header that carries ``secret`` (none without one)."""
    return {"Authorization": f"{SCHEME} {secret}"} if secret else {}


def bearer_secret(value: str) -> str | None:
    """The secret of an Authorization header's value; None when it is not `Bearer <secret>` (the scheme in any
    case, RFC 7235)."""
    scheme, _, secret = value.strip().partition(" ")
    secret = secret.strip()
    return secret if scheme.lower() == SCHEME.lower() and secret else None
