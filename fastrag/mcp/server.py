"""The MCP server of ``fastrag mcp``: one search tool per knowledge base, on the official ``mcp`` SDK.

::

    config = load_config("knowledge_bases.toml")       # fastrag.serve.config: the file fastrag serve reads
    served = server_from_config(config)                 # or create_server({"docs": KnowledgeBase(...)})
    await served.run_stdio()                            # fastrag mcp --config knowledge_bases.toml
    served = server_from_config(config, transport="http")         # with the [serve.tokens]
    served.run_http(config.server, host="127.0.0.1", port=8000)   # ... --transport http: /mcp

The tools (``tools/list``): ``search_<name>`` for each knowledge base ``<name>`` (a ``.`` in the name becomes
``_``), described by the knowledge-base tool's description and with its input schema
(:attr:`~fastrag.tool.KnowledgeBaseTool.parameters`: ``query``, ``top_k``, ``offset``, ``filter``; every other
search option is the knowledge base's TOML table's, never the model's). A call (``tools/call``) runs
:meth:`~fastrag.tool.KnowledgeBaseTool.run` and answers:

* the results: ``structuredContent`` is ``run``'s object (``results``, ``complete``, ``partial``,
  ``failed_branches``, ``skipped_branches``, ``incomplete``, ``zero_vector_branches``), and one text content
  block holds the same object as JSON; a partial search (a hybrid branch failed under
  ``on_branch_error="partial"``) is a result with ``complete`` false, not an error;
* a tool error (``isError`` true, one text block) when the arguments are wrong (the message names what to
  correct, so the model can call again), and when retrieval fails: ``"retrieval failed: the store <url>
  failed: <ErrorType>: <message>"`` (the URL without its password), or ``"retrieval failed: it took longer
  than request_timeout (<s> s); store <url>"``: never an empty "no match";
* an MCP protocol error for a tool name this caller has no tool for.

Tenancy: over stdio the process that started the server is its only caller and every knowledge base is
served to it, unscoped. Over HTTP without ``[serve.tokens]`` the same holds for every caller (bind it to
127.0.0.1, the default). With tokens, every request needs ``Authorization: Bearer <token>`` (else 401); a
token bound to ``user_id`` / ``agent_id`` gets tools confined to that tenant
(``as_tool(user_id=...)``: the tenant is not an argument the model can set, and a filter on a tenant key is
refused), and one with ``knowledge_bases`` sees only those tools. An MCP session belongs to the token that
opened it (the SDK answers another token's request on it as an unknown session).

The ``[serve]`` table's ``request_timeout`` bounds each call, ``max_body_bytes`` each HTTP request, and its
connection limits (``header_timeout``, ``max_connections``, ...) are applied by the same uvicorn protocol
classes as ``fastrag serve``'s (:mod:`fastrag.serve.server`). Each search's span (:mod:`fastrag.tracing`)
carries ``gen_ai.data_source.id`` = the knowledge base's name, under the SDK's own span of the MCP request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from fastrag import tracing
from fastrag.errors import ConfigurationError, FilterError, InvalidParameterError, UnknownParameterError
from fastrag.knowledge_base import KnowledgeBase
from fastrag.serve.config import ServeConfig, ServeLimits, ServerLimits, TokenBinding
from fastrag.serve.errors import store_of
from fastrag.tool import TOOL_NAME_PATTERN, KnowledgeBaseTool

try:
    import mcp_types as types
    from mcp.server import Server
    from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
    from mcp.server.auth.provider import AccessToken
    from mcp.server.stdio import stdio_server
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp.shared.exceptions import MCPError
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.routing import Route
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigurationError(f'fastrag mcp needs the mcp extra: pip install "fastrag-retrieval[mcp]" ({exc})') from exc

__all__ = ["KnowledgeBaseServer", "create_server", "server_from_config", "tool_name"]

logger = logging.getLogger("fastrag.mcp")

SERVER_NAME = "fastrag"
"""The server's name in ``serverInfo``."""
MCP_PATH = "/mcp"
"""Where the streamable HTTP transport answers (``POST``, ``GET``, ``DELETE``)."""
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
_ARGUMENT_ERRORS = (InvalidParameterError, UnknownParameterError, FilterError, ConfigurationError)


def tool_name(knowledge_base: str) -> str:
    """The tool of knowledge base ``knowledge_base``: ``search_<name>``, a ``.`` written as ``_``.

    Raises:
        ConfigurationError: the name is too long for a tool name (``search_<name>`` over 64 characters).
    """
    name = "search_" + knowledge_base.replace(".", "_")
    if not re.match(TOOL_NAME_PATTERN, name):
        raise ConfigurationError(f"knowledge base {knowledge_base!r}: its tool name {name!r} must match "
                                 f"{TOOL_NAME_PATTERN} (at most 64 characters): use a shorter name")  # fmt: skip
    return name


class _Tokens:
    """The SDK's ``TokenVerifier`` over ``[serve.tokens]``: a token is its binding's label (``client_id``)."""

    def __init__(self, tokens: tuple[TokenBinding, ...]) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        for binding in self.tokens:
            if binding.matches(token):
                return AccessToken(token=token, client_id=binding.label, scopes=[])
        return None


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


@dataclass(frozen=True, slots=True)
class KnowledgeBaseServer:
    """The MCP server of some knowledge bases (:func:`create_server`) and how it is served.

    Attributes:
        server: the SDK's low-level ``Server`` (``mcp.server.Server``): ``mcp.Client(server)`` talks to it
            in-process; :meth:`run_stdio` and :meth:`http_app` serve it.
        tokens: the bearer tokens its HTTP app requires (empty: none, and every caller is unscoped).
        limits: the request limits (``request_timeout``, ``max_body_bytes``).
    """

    server: Server[Any]
    tokens: tuple[TokenBinding, ...] = ()
    limits: ServeLimits = field(default_factory=ServeLimits)

    async def run_stdio(self) -> None:
        """Serve over this process's stdin and stdout until the client closes stdin.

        Raises:
            ConfigurationError: the server has tokens (they authenticate HTTP requests; a stdio caller has
                none, so every call would be refused).
        """
        if self.tokens:
            raise ConfigurationError("a server with bearer tokens is served over HTTP; build it without tokens for stdio")
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    def http_app(self, *, host: str = "127.0.0.1", path: str = MCP_PATH) -> Starlette:
        """The streamable HTTP ASGI app at ``path`` (the SDK's session manager; its lifespan runs the server's,
        which opens the knowledge bases).

        With :attr:`tokens`, every request needs ``Authorization: Bearer <token>`` of one of them (else 401,
        from the SDK's bearer middleware) and the token decides the request's tools. Requests are at most
        ``limits.max_body_bytes``. For a loopback ``host`` the SDK's DNS rebinding protection is on (``Host``
        and ``Origin`` must be loopback), as the SDK sets it up itself.
        """
        security = None
        if host in _LOCAL_HOSTS:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        manager = StreamableHTTPSessionManager(app=self.server, security_settings=security,
                                               max_request_body_size=self.limits.max_body_bytes)  # fmt: skip
        endpoint: Any = StreamableHTTPASGIApp(manager)
        middleware: list[Middleware] = []
        if self.tokens:
            endpoint = RequireAuthMiddleware(endpoint, [])
            middleware = [Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(_Tokens(self.tokens))),
                          Middleware(AuthContextMiddleware)]  # fmt: skip
        return Starlette(routes=[Route(path, endpoint=endpoint)], middleware=middleware,
                         lifespan=lambda _: manager.run())  # fmt: skip

    def run_http(self, server_limits: ServerLimits | None = None, *, host: str = "127.0.0.1", port: int = 8000,
                 log_level: str = "info") -> None:  # fmt: skip
        """Serve over streamable HTTP at ``http://host:port/mcp`` until interrupted, with uvicorn and the
        connection limits ``server_limits`` (``[serve]``'s, :func:`fastrag.serve.server.run`)."""
        from fastrag.serve.server import run

        run(self.http_app(host=host), server_limits, host=host, port=port, log_level=log_level)


def create_server(
    knowledge_bases: Mapping[str, KnowledgeBase],
    *,
    tokens: tuple[TokenBinding, ...] = (),
    limits: ServeLimits | None = None,
) -> KnowledgeBaseServer:
    """The MCP server with one search tool per knowledge base.

    The server's lifespan opens every knowledge base (a store that cannot be opened stops the server: its
    error is logged naming the knowledge base and raised) and closes them at the end, so the server owns
    them: pass knowledge bases nothing else closes.

    Args:
        knowledge_bases: ``{name: KnowledgeBase}``, at least one; names as ``[knowledge_bases.NAME]`` allows.
        tokens: the bearer tokens (``[serve.tokens]``) of an HTTP server: each request's token decides its
            tools (its tenant, its knowledge bases), and a request without one of them is refused. Empty:
            one kind of caller, unscoped, with every knowledge base (stdio; HTTP on a trusted interface).
        limits: ``request_timeout`` bounds each call, ``max_body_bytes`` each HTTP request (default
            :class:`~fastrag.serve.config.ServeLimits`).

    Raises:
        ConfigurationError: no knowledge base; a name whose tool name is too long, or two names with the same
            tool name (``a.b`` and ``a_b``); a knowledge base a caller could not search (it
            ``require_scope`` and a caller without a tenant reaches it: no tokens, or a token without
            ``user_id``/``agent_id``).
    """
    if not knowledge_bases:
        raise ConfigurationError("fastrag mcp needs at least one knowledge base")
    kbs = dict(knowledge_bases)
    limits = limits or ServeLimits()
    tools: dict[str, str] = {}  # tool name -> knowledge base
    for name in kbs:
        tool = tool_name(name)
        if tool in tools:
            raise ConfigurationError(f"knowledge bases {tools[tool]!r} and {name!r} have the same tool name {tool!r}")
        tools[tool] = name
    bindings = {binding.label: binding for binding in tokens}

    def reachable(binding: TokenBinding | None) -> list[str]:
        if binding is None or binding.knowledge_bases is None:
            return list(kbs)
        return [name for name in kbs if name in binding.knowledge_bases]

    def tool_for(name: str, binding: TokenBinding | None) -> KnowledgeBaseTool:
        scope = {} if binding is None else dict(binding.scope)
        return kbs[name].as_tool(name=tool_name(name), scope=scope or None)

    # every caller's tools are built once now, so a knowledge base no caller could search is refused at startup
    for binding in tokens or (None,):
        for name in reachable(binding):
            try:
                tool_for(name, binding)
            except InvalidParameterError as exc:
                who = "a caller without a tenant" if binding is None else f"serve.tokens.{binding.label}"
                raise ConfigurationError(f"knowledge_bases.{name} cannot be served to {who}: {exc}") from exc

    def caller(ctx: Any) -> TokenBinding | None:
        """The request's token binding; ``None`` for a server without tokens. With tokens, a request that
        did not come through the bearer middleware (no authenticated user) is refused."""
        if not tokens:
            return None
        request = getattr(ctx, "request", None)
        user = None if request is None else request.scope.get("user")
        label = getattr(getattr(user, "access_token", None), "client_id", None)
        binding = bindings.get(label) if isinstance(label, str) else None
        if binding is None:
            raise MCPError(types.INVALID_REQUEST, "this server needs Authorization: Bearer <token>")
        return binding
    def listed(name: str, binding: TokenBinding | None) -> types.Tool:
        tool = tool_for(name, binding)
        return types.Tool(
            name=tool.name,
            title=f"Search the knowledge base {name!r}",
            description=f"{tool.description} (Knowledge base: {name}.)",
            input_schema=tool.parameters,
            annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True),
        )

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        binding = caller(ctx)
        return types.ListToolsResult(tools=[listed(name, binding) for name in reachable(binding)])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        binding = caller(ctx)
        name = tools.get(params.name)
        if name is None or name not in reachable(binding):
            offered = [tool_name(n) for n in reachable(binding)]
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; this server's tools: {offered}")
        kb = kbs[name]
        tool = tool_for(name, binding)
        try:
            with tracing.data_source(name), anyio.move_on_after(limits.request_timeout) as deadline:
                answer = await tool.run(params.arguments or {})
        except _ARGUMENT_ERRORS as exc:
            return _error(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a failure of retrieval: the store (or a model) is named
            logger.error("knowledge base %r: retrieval failed: %s: %s", name, type(exc).__name__, exc)
            return _error(f"retrieval failed: the store {store_of(kb, exc)} failed: {type(exc).__name__}: {exc}")
        if deadline.cancelled_caught:
            return _error(f"retrieval failed: it took longer than request_timeout ({limits.request_timeout:g} s); "
                          f"store {store_of(kb, None)}")  # fmt: skip
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))], structured_content=answer)

    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            for name, kb in kbs.items():
                try:
                    await stack.enter_async_context(kb)
                except Exception as exc:
                    logger.error("knowledge base %r could not be opened: %s: %s", name, type(exc).__name__, exc)
                    raise
                logger.info("knowledge base %r open: %r", name, kb)
            yield {}

    from fastrag import __version__

    server = Server(SERVER_NAME, version=__version__, instructions=_instructions(kbs), lifespan=lifespan,
                    on_list_tools=list_tools, on_call_tool=call_tool)  # fmt: skip
    return KnowledgeBaseServer(server=server, tokens=tuple(tokens), limits=limits)


def _instructions(kbs: Mapping[str, KnowledgeBase]) -> str:
    names = ", ".join(f"{tool_name(n)} ({n})" for n in kbs)
    return (f"Search tools over fastrag knowledge bases: {names}. Each returns passages best first; a result with "
            "complete false may be missing passages (a branch or stage failed or stopped early).")  # fmt: skip


def server_from_config(config: ServeConfig, *, transport: str = "stdio") -> KnowledgeBaseServer:
    """:func:`create_server` over the knowledge bases of a :class:`~fastrag.serve.config.ServeConfig` (each
    table through :meth:`~fastrag.knowledge_base.KnowledgeBase.from_config`; an ``llm`` sub-table, which
    ``fastrag serve`` uses for ``/ask``, is ignored: MCP clients bring their own model), with its limits, and
    for ``transport="http"`` its tokens. Over ``"stdio"`` the tokens are not used (the process that started
    the server is its one caller; logged at INFO when the file has tokens).

    Raises:
        ConfigurationError: an unknown transport, a table :meth:`KnowledgeBase.from_config` refuses (named),
            or what :func:`create_server` raises.
    """
    if transport not in ("stdio", "http"):
        raise ConfigurationError(f"transport must be 'stdio' or 'http', got {transport!r}")
    kbs: dict[str, KnowledgeBase] = {}
    for name, table in config.knowledge_bases.items():
        table = dict(table)
        if table.pop("llm", None) is not None:
            logger.info("knowledge base %r: its llm table is for fastrag serve's /ask; fastrag mcp ignores it", name)
        try:
            kbs[name] = KnowledgeBase.from_config(table)
        except ConfigurationError as exc:
            raise ConfigurationError(f"knowledge_bases.{name}: {exc}") from exc
    tokens = config.tokens if transport == "http" else ()
    if config.tokens and not tokens:
        logger.info("serve.tokens authenticate HTTP requests; over stdio they are not used")
    return create_server(kbs, tokens=tokens, limits=config.limits)
