"""A knowledge base's tenant scopes: the scope of a call, checks on what a write may carry (the scoped view
itself is :class:`fastrag.scoping.ScopedStore`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastrag.errors import (
    InvalidParameterError,
)
from fastrag.knowledge_base.schema import (
    IMPLICIT_FIELDS,
    KEY_RE,
    STAMPED_KEYS,
    TENANT_FIELD,
)
from fastrag.models import (
    RESERVED_KEYS,
    Document,
)
from fastrag.scoping import (
    Scope,
    check_scope_value,
    check_unscoped_id,
)


def scope_of(user_id: Any, agent_id: Any, scope: Mapping[str, Any] | None) -> Scope:
    """The tenant keys of one call, checked (:class:`~fastrag.scoping.Scope`): identifiers that are not
    reserved keys, with values that are non-empty str or signed 64-bit int (never bool or float);
    ``user_id``/``agent_id`` must agree with ``scope`` in type and value."""
    merged: dict[str, Any] = {}
    if scope is not None:
        if not isinstance(scope, Mapping):
            raise InvalidParameterError(f"scope must be a mapping of metadata key to value, got {scope!r}")
        for key, value in scope.items():
            if not isinstance(key, str) or not KEY_RE.match(key):
                raise InvalidParameterError(f"scope keys must be identifiers (letters, digits, _), got {key!r}")
            if key in RESERVED_KEYS or (key in IMPLICIT_FIELDS and IMPLICIT_FIELDS[key] != TENANT_FIELD):
                raise InvalidParameterError(f"scope key {key!r} is a reserved metadata key")
            check_scope_value(key, value)
            merged[key] = value
    for key, value in (("user_id", user_id), ("agent_id", agent_id)):
        if value is None:
            continue
        check_scope_value(key, value)
        if key in merged and (type(merged[key]) is not type(value) or merged[key] != value):
            raise InvalidParameterError(f"{key}={value!r} contradicts scope[{key!r}]={merged[key]!r}")
        merged[key] = value
    return Scope(merged)


check_id = check_unscoped_id  # a knowledge base never writes an id that looks scoped (fastrag.scoping)


def check_stamped_keys(doc: Document) -> None:
    for key in STAMPED_KEYS:
        if key in doc.metadata:
            raise InvalidParameterError(
                f"document {doc.id!r} has metadata key {key!r}, which fastrag's ranking stages set on the copies "
                "they return; remove it before writing (a search result's score, rank and branches are not data)"
            )




# --------------------------------------------------------------------------------------------- fields


