"""A Griffe extension for the API reference: fastrag's docstrings use reStructuredText markup, the site is Markdown.

Loaded by mkdocstrings (``extensions:`` in ``mkdocs.yml``); it rewrites each docstring before it is
rendered, and never touches the source:

- ``:class:`~fastrag.models.Document``` (any role: ``class``, ``func``, ``meth``, ``attr``, ``data``,
  ``mod``, ``exc``, ``obj``) becomes a Markdown cross-reference. A short name is looked up as Python would
  see it from the docstring's scope (the object, its parents, then its module's names and imports). A
  reference into fastrag becomes ``[`Document`][fastrag.models.Document]``, which mkdocs-autorefs must
  resolve, so in strict mode a renamed or removed target fails the build. A reference outside fastrag
  (``anyio.sleep``, ``pathlib.Path``, a builtin) or to a private module becomes plain code, since no
  inventory of those is available offline. A name found nowhere is logged as a warning (strict mode fails).
- A ``::`` literal block becomes a fenced block (``python`` when it compiles as Python, else ``text``).
- A simple table (rows framed by ``=====  =====`` lines) becomes a fenced ``text`` block, aligned as written.
- ```text <https://...>`_`` links become Markdown links.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import logging
import re
import textwrap
from typing import Any

import griffe

# A WARNING under "mkdocs." counts as a warning for `mkdocs build --strict`.
logger = logging.getLogger("mkdocs.plugins.fastrag_rst")

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|type):`(?P<target>[^`]+)`")
_RST_LINK = re.compile(r"`(?P<text>[^`<]+?)\s*<(?P<url>https?://[^>]+)>`__?")
_TABLE_BORDER = re.compile(r"^\s*=+(?:\s+=+)+\s*$")


class RstToMarkdown(griffe.Extension):
    """Rewrite the RST markup of every docstring in a loaded package into Markdown (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, scope=obj, root=pkg)


def _walk(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and its members, recursively; private ones (``_name``) are not rendered, so they are left out."""
    found = [obj]
    for name, member in obj.members.items():
        if member.is_alias or (name.startswith("_") and not name.startswith("__")):
            continue
        found.extend(_walk(member))
    return found


# ---------------------------------------------------------------------------------------------- roles


def convert(text: str, *, scope: griffe.Object, root: griffe.Module) -> str:
    """The Markdown form of one docstring."""
    text = _literal_blocks(text)
    text = _RST_LINK.sub(lambda m: f"[{m.group('text').strip()}]({m.group('url')})", text)
    return _outside_fences(text, lambda chunk: _ROLE.sub(lambda m: _reference(m.group("target"), scope, root), chunk))


def _outside_fences(text: str, fn: Any) -> str:
    """Apply ``fn`` to the parts of ``text`` outside fenced code blocks."""
    parts = re.split(r"(^[ \t]*```.*?^[ \t]*```[ \t]*$)", text, flags=re.DOTALL | re.MULTILINE)
    return "".join(part if i % 2 else fn(part) for i, part in enumerate(parts))


def _reference(raw: str, scope: griffe.Object, root: griffe.Module) -> str:
    target = raw.strip()
    short = target.startswith("~")
    target = target.lstrip("~.").removesuffix("()")
    shown = target.rsplit(".", 1)[-1] if short else target
    path = _resolve(target, scope, root)
    if path is None:
        logger.warning("%s: cannot resolve the reference %r in its docstring", scope.path, raw)
        return f"[`{shown}`][{target}]"
    if not path.startswith(root.path + ".") and path != root.path:
        return f"`{shown}`"  # outside fastrag: no inventory to link to
    if any(part.startswith("_") and not part.startswith("__") for part in path.split(".")):
        return f"`{shown}`"  # private: not in the reference
    return f"[`{shown}`][{path}]"


def _resolve(target: str, scope: griffe.Object, root: griffe.Module) -> str | None:
    head, _, rest = target.partition(".")
    if head == root.name:
        return _member_path(root, rest) if rest else root.path
    obj: griffe.Object | None = scope
    while obj is not None:
        if head in obj.members:
            return _member_path(obj.members[head], rest)
        obj = obj.parent
    if head in vars(builtins) or "." in target or importlib.util.find_spec(head) is not None:
        return target  # a builtin, a module, or a dotted name outside fastrag (anyio.sleep, pathlib.Path)
    return None


def _member_path(obj: griffe.Object | griffe.Alias, rest: str) -> str | None:
    """The canonical path of ``obj[rest]``, following imports; ``None`` when a fastrag member is missing."""
    if obj.is_alias:
        target_path = obj.target_path
        try:
            obj = obj.final_target
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return f"{target_path}.{rest}" if rest else target_path  # outside the loaded package
    if not rest:
        return obj.path
    try:
        member = obj[rest]
    except (KeyError, ValueError, griffe.AliasResolutionError):
        return None
    return _member_path(member, "")


# ------------------------------------------------------------------------------- literal blocks, tables


def _literal_blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip()
        if _TABLE_BORDER.match(line):
            end = i + 1  # the table ends at a border line followed by a blank line (or the end)
            while end < len(lines) and not (
                _TABLE_BORDER.match(lines[end]) and (end + 1 == len(lines) or not lines[end + 1].strip())
            ):
                end += 1
            end = min(end + 1, len(lines))
            out += _markdown_table(lines[i:end])
            i = end
            continue
        if stripped.endswith("::") and not stripped.endswith(":::"):
            indent = len(line) - len(line.lstrip())
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            k = j
            while k < len(lines) and (not lines[k].strip() or len(lines[k]) - len(lines[k].lstrip()) > indent):
                k += 1
            while k > j and not lines[k - 1].strip():
                k -= 1
            if k > j:
                intro = stripped[:-2].rstrip()
                pad = " " * indent
                if intro.strip():
                    out += [intro + ":", ""]
                block = textwrap.dedent("\n".join(lines[j:k]))
                out += [f"{pad}```{_language(block)}", *(pad + b if b else b for b in block.split("\n")), f"{pad}```"]
                i = k
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _markdown_table(rows: list[str]) -> list[str]:
    """An RST simple table (borders of ``=`` runs) as a Markdown table.

    Column spans come from the first border; a row whose first column is blank continues the row above.
    """
    border = rows[0]
    indent = border[: len(border) - len(border.lstrip())]
    spans = [m.span() for m in re.finditer(r"=+", border)]
    spans[-1] = (spans[-1][0], None)
    table: list[list[str]] = []
    header: list[str] | None = None
    for n, row in enumerate(rows[1:], start=1):
        if _TABLE_BORDER.match(row):
            if header is None and table and n < len(rows) - 1:  # the border under the header
                header = table.pop()
            continue
        if not row.strip():
            continue
        cells = [row[start:end].strip() for start, end in spans]
        if table and not cells[0]:
            table[-1] = [f"{a} {b}".strip() for a, b in zip(table[-1], cells, strict=True)]
        else:
            table.append(cells)
    header = header or [""] * len(spans)

    def line(cells: list[str]) -> str:
        return indent + "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return ["", line(header), indent + "|" + "---|" * len(spans), *(line(r) for r in table), ""]


def _language(block: str) -> str:
    try:
        json.loads(block)
    except ValueError:
        pass
    else:
        return "json"
    try:
        compile(block, "<docstring>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError:
        return "text"
    return "python"
