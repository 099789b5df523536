"""Tenant scopes: the values a scope may hold, and the one stored-id encoding every scoped view shares.

A *scope* maps tenant keys to values (``{"user_id": "alice"}``, ``{"tenant_id": 42}``). A scoped write
stores a document under a *scoped id* that names its scope, so two scopes writing the same id never
share a stored id. :class:`~fastrag.vector_store.tenant.TenantScopedStore` (one key) and
:class:`~fastrag.knowledge_base.KnowledgeBase`'s ``user_id=`` / ``agent_id=`` / ``scope=`` (several keys)
both use this encoding, so the same tenant written through either is stored under the same ids::

    <segment>&<segment>...::<id>        segments sorted by key
    <key>=<percent-encoded str value>   a str value
    <key>#<decimal int value>           an int value

Keys and string values are percent-encoded (RFC 3986 unreserved characters stay as they are; ``&``,
``=``, ``#``, ``:``, ``%``, NUL and every non-ASCII character are encoded), so a segment never holds a
separator and the first ``::`` always ends the scope. The encoding is injective: tenant ``1`` (an int)
and tenant ``"1"`` (a str) get ``k#1`` and ``k=1``; tenant ``"a:"`` writing ``":b"`` is stored as
``k=a%3A:::b`` and tenant ``"a"`` writing ``"::b"`` as ``k=a::::b``, which differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from fastrag.errors import InvalidParameterError
from fastrag.filters import Comparison
from fastrag.filters import field as filter_field
from fastrag.models import RESERVED_KEYS

__all__ = [
    "DEFAULT_TENANT_KEY",
    "MAX_SCOPE_INT",
    "MIN_SCOPE_INT",
    "SCOPE_SEPARATOR",
    "check_scope_value",
    "scope_prefix",
    "scoped_id",
    "split_scoped_id",
    "tenant_filter",
]

MIN_SCOPE_INT = -(2**63)
"""The smallest int scope value (signed 64-bit, what every store's integer metadata holds)."""
MAX_SCOPE_INT = 2**63 - 1
"""The largest int scope value (signed 64-bit)."""
SCOPE_SEPARATOR = "::"
"""Between a scoped id's scope and the id the tenant wrote."""

_ENCODED = r"[A-Za-z0-9_.~%-]+"  # what quote(..., safe="") produces: no separator can occur in it
_SEGMENT = rf"{_ENCODED}(?:={_ENCODED}|#-?[0-9]+)"
_SCOPED_ID = re.compile(rf"^({_SEGMENT}(?:&{_SEGMENT})*){SCOPE_SEPARATOR}(.*)$", re.DOTALL)


def check_scope_value(key: str, value: Any) -> None:
    """Check one scope value: a non-empty str of valid Unicode, or an int within signed 64 bits.

    Raises:
        InvalidParameterError: anything else (bools and floats included), naming ``key``.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidParameterError(
            f"scope value of {key!r} must be a non-empty str or an int, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, int):
        if not MIN_SCOPE_INT <= value <= MAX_SCOPE_INT:
            raise InvalidParameterError(
                f"scope value of {key!r} must be an int within signed 64-bit [-2**63, 2**63 - 1]; "
                f"got one with {value.bit_length()} bits"
            )
        return
    if value == "":
        raise InvalidParameterError(f"scope value of {key!r} must be a non-empty str or an int, got ''")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"scope value of {key!r} is not valid Unicode (a lone surrogate?)") from exc


def _segment(key: str, value: str | int) -> str:
    name = quote(key, safe="")
    return f"{name}#{value}" if isinstance(value, int) else f"{name}={quote(value, safe='')}"


def scope_prefix(scope: Mapping[str, str | int]) -> str:
    """The scope part of a scoped id: its segments sorted by key, joined by ``&`` (values already checked)."""
    return "&".join(_segment(key, scope[key]) for key in sorted(scope))


def scoped_id(scope: Mapping[str, str | int], doc_id: str) -> str:
    """The stored id of ``doc_id`` written under ``scope`` (a non-empty scope of checked values)."""
    return f"{scope_prefix(scope)}{SCOPE_SEPARATOR}{doc_id}"


def split_scoped_id(stored_id: str) -> tuple[dict[str, str | int], str] | None:
    """``(scope, id)`` of a scoped id, or ``None`` when ``stored_id`` is not one (an unscoped write)."""
    match = _SCOPED_ID.match(stored_id)
    if match is None:
        return None
    scope: dict[str, str | int] = {}
    for segment in match.group(1).split("&"):
        if "=" in segment:
            key, _, text = segment.partition("=")
            scope[unquote(key)] = unquote(text)
        else:
            key, _, number = segment.partition("#")
            scope[unquote(key)] = int(number)
    return scope, match.group(2)


DEFAULT_TENANT_KEY = "tenant_id"
"""The metadata key that holds a document's tenant, unless another is given."""


def tenant_filter(tenant: str | int, tenant_key: str = DEFAULT_TENANT_KEY) -> Comparison:
    """The filter ``equals(tenant_key, tenant)``, after checking both.

    Raises:
        InvalidParameterError: ``tenant`` is not a non-empty str of valid Unicode or an int within signed
            64 bits (bools rejected; :func:`check_scope_value`), or ``tenant_key`` is not a
            non-empty str of valid Unicode or is a reserved metadata key (``score``, ``source_uri``...).
    """
    if isinstance(tenant, bool) or not isinstance(tenant, str | int) or tenant == "":
        raise InvalidParameterError(f"tenant must be a non-empty str or an int, got {tenant!r}")
    check_scope_value("tenant", tenant)
    if not isinstance(tenant_key, str) or not tenant_key:
        raise InvalidParameterError(f"tenant_key must be a non-empty str, got {tenant_key!r}")
    check_scope_value("tenant_key", tenant_key)  # valid Unicode
    if tenant_key in RESERVED_KEYS:
        raise InvalidParameterError(f"tenant_key {tenant_key!r} is a reserved metadata key")
    return filter_field(tenant_key) == tenant
