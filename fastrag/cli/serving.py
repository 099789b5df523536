"""``fastrag serve`` and ``fastrag mcp``: the knowledge bases over HTTP and the Model Context Protocol."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fastrag.cli.app import (
    EXIT_INVALID,
    main,
    run_command,
)
from fastrag.errors import ConfigurationError


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="knowledge_bases.toml: [knowledge_bases.NAME] tables, optional [serve] limits and tokens "
                   "(docs/serve.md).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(("critical", "error", "warning", "info", "debug")),
              help="Level of the server log and of the JSON access log (fastrag.serve.access, at info).")
def serve(config_path: Path, host: str, port: int, log_level: str) -> None:
    """Serve knowledge bases over HTTP: retrieve, add and delete documents, health, metrics, OpenAPI.

    One event loop (uvicorn); every knowledge base is opened at startup and closed at shutdown. A store
    that cannot be opened stops the startup (exit status 3).
    """
    import logging

    from fastrag.serve.config import load_config

    try:
        config = load_config(config_path)
        try:
            from fastrag.serve.app import app_from_config
            from fastrag.serve.server import run
        except ImportError as exc:
            raise ConfigurationError(f'fastrag serve needs the serve extra: pip install "fastrag-retrieval[serve]" ({exc})') from exc
        app = app_from_config(config)
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    served = logging.getLogger("fastrag.serve")
    served.addHandler(handler)
    served.setLevel(log_level.upper())
    # uvicorn with the [serve] connection limits (fastrag.serve.server); its own access log is off:
    # fastrag.serve.access logs each request once, with its stage timings
    run(app, config.server, host=host, port=port, log_level=log_level)


# ------------------------------------------------------------------------------------------------ mcp


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="knowledge_bases.toml, the file fastrag serve reads: [knowledge_bases.NAME] tables, optional "
                   "[serve] limits and tokens (docs/mcp.md).")
@click.option("--transport", type=click.Choice(("stdio", "http")), default="stdio", show_default=True,
              help="stdio: an MCP client starts this command and talks over its stdin/stdout; http: streamable "
                   "HTTP at http://HOST:PORT/mcp, with the [serve.tokens] bearer tokens.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (http).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port (http).")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(("critical", "error", "warning", "info", "debug")),
              help="Level of the server log, on stderr (stdout is the protocol's, over stdio).")
def mcp(config_path: Path, transport: str, host: str, port: int, log_level: str) -> None:
    """Serve knowledge bases as Model Context Protocol tools: one search tool per knowledge base.

    Each tool is the knowledge base's as_tool() (its input schema: query, top_k, offset, filter) and answers
    what the tool's run() returns; a failed retrieval is a tool error naming the store. Every knowledge base
    is opened at startup; one that cannot be opened stops the server.
    """
    import logging

    from fastrag.serve.config import load_config

    try:
        config = load_config(config_path)
        from fastrag.mcp import (
            server_from_config,  # the mcp extra: a ConfigurationError with the pip command
        )

        served = server_from_config(config, transport=transport)
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("fastrag.mcp")
    logger.addHandler(handler)
    logger.setLevel(log_level.upper())
    if transport == "stdio":
        run_command(served.run_stdio)  # a store that cannot be opened: exit 3, naming it
    else:
        served.run_http(config.server, host=host, port=port, log_level=log_level)


if __name__ == "__main__":
    main()
