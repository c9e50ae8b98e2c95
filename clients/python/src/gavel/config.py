"""Where a client's endpoints and credentials come from.

The same ``GAVEL_*`` variables the Rust SDK and the CLI read
(crates/gavel-client/src/credentials.rs), with the same rules:

- ``GAVEL_ENDPOINTS``: comma-separated ``host:port`` list (default the dev
  cluster's 127.0.0.1:7401-7403);
- ``GAVEL_CA``: the cluster CA (PEM file); its presence turns TLS on;
- ``GAVEL_CERT`` and ``GAVEL_KEY``: the client certificate and its key;
- ``GAVEL_TOKEN`` or ``GAVEL_TOKEN_FILE``: a bearer token (it takes precedence
  over the certificate's principal on the server);
- ``GAVEL_INSECURE=1``: plaintext on purpose (a node started ``--insecure``).

Contradictions are refused as in the Rust SDK: insecure with TLS material or
a token, a certificate without its key, a certificate or token without the CA
(a token must never cross the network in plaintext), a token given twice.
Empty values count as unset.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gavel.errors import GavelError

#: The endpoints used when GAVEL_ENDPOINTS is not set: `gavel dev`'s defaults.
DEFAULT_ENDPOINTS = ("127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403")


def _config_error(message: str) -> GavelError:
    return GavelError("CONFIG", message)


@dataclass(frozen=True)
class Tls:
    """TLS material as PEM bytes: the cluster CA and, optionally, a client certificate."""

    ca: bytes
    cert: bytes | None = None
    key: bytes | None = None

    def __repr__(self) -> str:
        # The private key stays out of logs.
        return f"Tls(identity={self.cert is not None})"


@dataclass(frozen=True)
class ClientOptions:
    """How to reach a cluster, and the client's timings (seconds)."""

    #: Node addresses, ``host:port`` (or ``https://host:port``); any node works.
    endpoints: tuple[str, ...] = DEFAULT_ENDPOINTS
    #: TLS towards the nodes; None dials plaintext, which only an insecure node answers.
    tls: Tls | None = None
    #: A bearer token sent as ``authorization: Bearer <token>`` on every call.
    token: str | None = field(default=None, repr=False)
    #: Deadline of one attempt of one call (long-polls add their wait).
    call_timeout: float = 5.0
    #: How long a call keeps retrying UNAVAILABLE and broken connections.
    retry_budget: float = 20.0
    #: Send later calls straight to the leader a follower names.
    follow_leader: bool = True

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ClientOptions:
        """The options the ``GAVEL_*`` variables name (``os.environ`` by default)."""
        env = os.environ if env is None else env

        def value(name: str) -> str | None:
            text = env.get(name)
            return text if text is not None and text.strip() else None

        def read(name: str, what: str) -> bytes | None:
            path = value(name)
            if path is None:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as error:
                raise _config_error(f"{what} {path}: {error.strerror}") from error

        insecure = (value("GAVEL_INSECURE") or "").strip().lower() in ("1", "true", "yes", "on")
        has_token = value("GAVEL_TOKEN") is not None or value("GAVEL_TOKEN_FILE") is not None
        tls_named = any(value(name) is not None for name in ("GAVEL_CA", "GAVEL_CERT", "GAVEL_KEY"))
        if insecure and (tls_named or has_token):
            raise _config_error("GAVEL_INSECURE dials plaintext: drop GAVEL_CA, GAVEL_CERT, GAVEL_KEY and GAVEL_TOKEN")
        if value("GAVEL_TOKEN") is not None and value("GAVEL_TOKEN_FILE") is not None:
            raise _config_error("give the token once: GAVEL_TOKEN or GAVEL_TOKEN_FILE")
        if (value("GAVEL_CERT") is None) != (value("GAVEL_KEY") is None):
            raise _config_error("GAVEL_CERT and GAVEL_KEY go together")
        token_text = value("GAVEL_TOKEN")
        if token_text is None:
            token_bytes = read("GAVEL_TOKEN_FILE", "token file")
            token_text = token_bytes.decode("utf-8") if token_bytes is not None else None
        token = token_text.strip() if token_text is not None else None
        if token == "":
            raise _config_error("the token is empty")
        ca = read("GAVEL_CA", "CA certificate")
        cert = read("GAVEL_CERT", "client certificate")
        key = read("GAVEL_KEY", "client key")
        if ca is None and (cert is not None or token is not None):
            raise _config_error("a client certificate or token needs TLS: give the cluster CA (GAVEL_CA)")
        endpoints_text = value("GAVEL_ENDPOINTS")
        endpoints = (
            tuple(part.strip() for part in endpoints_text.split(",") if part.strip())
            if endpoints_text
            else DEFAULT_ENDPOINTS
        )
        tls = Tls(ca=ca, cert=cert, key=key) if ca is not None else None
        return ClientOptions(endpoints=endpoints, tls=tls, token=token)


def normalize_endpoint(endpoint: str, tls: bool) -> str:
    """``host:port`` of an endpoint, checked: a typo fails at once, not after the retry budget.

    A scheme that contradicts the configuration is refused rather than changed.
    """
    bare = endpoint
    if "://" in endpoint:
        scheme, bare = endpoint.split("://", 1)
        if scheme not in ("http", "https"):
            raise _config_error(f"endpoint {endpoint!r} is not host:port (as in 127.0.0.1:7401)")
        if (scheme == "https") != tls:
            raise _config_error(
                f"endpoint {endpoint!r} is plaintext but TLS is configured; write it as host:port or https://"
                if tls
                else f"endpoint {endpoint!r} needs TLS: give the cluster CA (GAVEL_CA)"
            )
    bare = bare.removesuffix("/")
    host, colon, port = bare.rpartition(":")
    if not colon or not host or "/" in host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise _config_error(f"endpoint {endpoint!r} is not host:port (as in 127.0.0.1:7401)")
    return bare
