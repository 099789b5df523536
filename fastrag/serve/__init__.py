"""``fastrag serve``: knowledge bases as an HTTP retrieval service (FastAPI, served by uvicorn).

Needs the ``serve`` extra (``pip install "fastrag-retrieval[serve]"``). See docs/serve.md.

* :mod:`fastrag.serve.config`: the TOML configuration (knowledge bases, limits, bearer tokens);
* :mod:`fastrag.serve.schemas`: the request and response bodies (the OpenAPI schema);
* :mod:`fastrag.serve.app`: :func:`~fastrag.serve.app.create_app`, the ASGI app;
* :mod:`fastrag.serve.server`: uvicorn as ``fastrag serve`` runs it, with read timeouts and a connection limit;
* :mod:`fastrag.serve.ask`: the ``/ask`` route, for knowledge bases with an LLM;
* :mod:`fastrag.serve.retrieve_api`: ``POST /v1/retrieve``, the Retrieve API of the original design.
"""

from __future__ import annotations

from fastrag.serve.config import (
    ServeConfig,
    ServeLimits,
    ServerLimits,
    TokenBinding,
    load_config,
    parse_config,
)

__all__ = [
    "ServeConfig",
    "ServeLimits",
    "ServerLimits",
    "TokenBinding",
    "app_from_config",
    "create_app",
    "load_config",
    "parse_config",
]


def __getattr__(name: str) -> object:
    # the app needs FastAPI (the serve extra); the configuration does not
    if name in ("create_app", "app_from_config"):
        try:
            from fastrag.serve import app
        except ImportError as exc:  # pragma: no cover - depends on the environment
            from fastrag.errors import ConfigurationError

            raise ConfigurationError(
                f'fastrag serve needs the serve extra: pip install "fastrag-retrieval[serve]" ({exc})'
            ) from exc
        return getattr(app, name)
    raise AttributeError(f"module 'fastrag.serve' has no attribute {name!r}")
