"""The documentation cannot rot: every code sample in docs/ and README.md runs, docstring examples run, and the
site builds in strict mode (STYLE.md: "code in docs/ runs in CI").

The conventions (which blocks run, the ``<!-- ci: ... -->`` markers, ``title="..."`` file blocks) are
documented in docs/contributing.md. In short, per page, in a fresh working directory holding a copy of docs/
already indexed into the default store:

- ```python blocks run; consecutive ones run as one program, concatenated in page order;
- ```bash / ```console blocks with a ``fastrag`` command run with ``bash -e -o pipefail`` and must exit 0;
- a block with ``title="PATH"`` is written to PATH first; ```json and ```toml blocks must parse;
- ``<!-- ci: skip REASON -->``, ``<!-- ci: needs VARIABLE -->`` and ``<!-- ci: exit N -->`` on the line above
  a fence skip it, run it only when VARIABLE is set, or expect exit status N.

Pages run concurrently (a few subprocesses at a time), so the whole module stays well under a minute.
"""

from __future__ import annotations

import ast
import doctest
import html
import importlib
import importlib.util
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

import fastrag

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in [*DOCS.rglob("*.md"), ROOT / "README.md"])
BIN = Path(sys.executable).parent
FASTRAG_SCRIPT = BIN / "fastrag"
TIMEOUT = 180  # seconds per program or shell block

SHELLS = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*ci:\s*(?P<kind>skip|needs|exit)\b\s*(?P<arg>.*?)\s*-->\s*$", re.DOTALL)
TITLE = re.compile(r"""\btitle=["']([^"']+)["']""")
# a command line that runs fastrag, after an optional prompt and VAR=value assignments
FASTRAG_COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*fastrag(?:\s|$)")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    info: str
    code: str
    marker: tuple[str, str] | None  # (kind, argument) of a <!-- ci: ... --> comment right above

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def title(self) -> str | None:
        match = TITLE.search(self.info)
        return match.group(1) if match else None

    def shell_commands(self) -> str:
        """The script of a shell block (for ``console``, the ``$ `` lines and their continuations)."""
        if self.lang != "console":
            return self.code
        out, continued = [], False
        for line in self.code.splitlines():
            if line.startswith("$ ") or continued:
                out.append(line[2:] if line.startswith("$ ") and not continued else line)
                continued = line.rstrip().endswith("\\")
        return "\n".join(out) + "\n"

    @property
    def runs_fastrag(self) -> bool:
        return self.lang in SHELLS and any(FASTRAG_COMMAND.match(line) for line in self.shell_commands().splitlines())


def blocks_of(path: Path, page: str) -> list[Block]:
    """The fenced blocks of the page at ``path`` (called ``page`` in messages), in order, each with the ci
    marker on the line directly above it, if any."""
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    blocks, above = [], None
    for token in tokens:
        if token.type == "html_block":
            above = token
        elif token.type == "fence" and token.map is not None:
            marker = None
            if above is not None and above.map is not None and above.map[1] == token.map[0]:
                match = MARKER.match(above.content)
                if match:
                    marker = (match.group("kind"), match.group("arg"))
                elif "ci:" in above.content:
                    raise AssertionError(f"{page}:{above.map[0] + 1}: malformed ci marker {above.content.strip()!r}")
            info = token.info.strip()
            lang = info.split(maxsplit=1)[0].lower() if info else ""
            blocks.append(Block(page, token.map[0] + 1, lang, info, token.content, marker))
    return blocks


# ------------------------------------------------------------------------------------------- running


def clean_env() -> dict[str, str]:
    """The environment of every block: no fastrag setting (FASTRAG_STORE, ...), but the FASTRAG_TEST_* service
    URLs that ``needs`` markers name; the fastrag command and this Python first on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_") or k.startswith("FASTRAG_TEST_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@dataclass
class PageRun:
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    ran: int = 0


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_page(path: Path, page: str, workdir: Path, scripts: Path) -> PageRun:
    """Run the blocks of the page at ``path`` in ``workdir`` (see the module docstring); collect what failed."""
    result = PageRun()
    env = clean_env()
    pending: list[Block] = []

    def run_python() -> None:
        if not pending:
            return
        lines: list[str] = []
        origin: list[str] = []  # for each script line, where it comes from
        for block in pending:
            lines.append(f"# --- {block.where}")
            origin.append(block.where)
            for n, line in enumerate(block.code.splitlines(), start=1):
                lines.append(line)
                origin.append(f"{block.page}:{block.line + n}")
        script = scripts / f"{re.sub(r'[^A-Za-z0-9]+', '_', page)}_{pending[0].line}.py"
        script.write_text("\n".join(lines) + "\n", encoding="utf-8")
        where = ", ".join(b.where for b in pending)
        pending.clear()
        proc = subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                              check=False, timeout=TIMEOUT)
        result.ran += 1
        if proc.returncode != 0:
            at = [int(m) for m in re.findall(rf'File "{re.escape(str(script))}", line (\d+)', proc.stderr)]
            origin_line = f" (failing line: {origin[at[-1] - 1]})" if at and at[-1] <= len(origin) else ""
            result.failures.append(f"python blocks {where} exited {proc.returncode}{origin_line}:\n{_tail(proc.stderr)}")

    for block in blocks_of(path, page):
        if block.marker and block.marker[0] == "skip":
            result.skipped.append(f"{block.where}: {block.marker[1] or 'marked skip'}")
            continue
        if block.marker and block.marker[0] == "needs" and not os.environ.get(block.marker[1]):
            result.skipped.append(f"{block.where}: needs {block.marker[1]}")
            continue
        if block.lang == "json" and not block.title:
            try:
                json.loads(block.code)
            except ValueError as exc:
                result.failures.append(f"{block.where}: invalid JSON: {exc}")
        if block.lang == "toml":
            try:
                tomllib.loads(block.code)
            except tomllib.TOMLDecodeError as exc:
                result.failures.append(f"{block.where}: invalid TOML: {exc}")
        if block.title and block.lang not in SHELLS:
            target = workdir / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
        if block.lang in ("python", "py", "python3"):
            pending.append(block)
        elif block.runs_fastrag:
            run_python()
            if not FASTRAG_SCRIPT.exists():
                result.skipped.append(f"{block.where}: no fastrag console script next to {sys.executable}")
                continue
            expected = int(block.marker[1]) if block.marker and block.marker[0] == "exit" else 0
            script = scripts / f"{re.sub(r'[^A-Za-z0-9]+', '_', page)}_{block.line}.sh"
            script.write_text("set -e -o pipefail\n" + block.shell_commands(), encoding="utf-8")
            proc = subprocess.run(["bash", str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                                  check=False, timeout=TIMEOUT)
            result.ran += 1
            if proc.returncode != expected:
                result.failures.append(
                    f"shell block {block.where} exited {proc.returncode}, expected {expected}:\n"
                    f"{_tail(proc.stdout, 8)}\n{_tail(proc.stderr)}"
                )
        elif block.marker and block.marker[0] == "exit":
            result.failures.append(f"{block.where}: an exit marker on a block that does not run")
    run_python()
    return result


@pytest.fixture(scope="session")
def indexed_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a copy of docs/, indexed into the default store (.fastrag/fastrag.db)."""
    template = tmp_path_factory.mktemp("docs-template")
    shutil.copytree(DOCS, template / "docs")
    proc = subprocess.run([sys.executable, "-m", "fastrag.cli", "index", "docs/"], cwd=template, env=clean_env(),
                          capture_output=True, text=True, check=False, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return template


class PageRunner:
    """Runs the selected pages concurrently, on first use, and hands each test its page's result."""

    def __init__(self, pages: list[str], template: Path, tmp_root: Path) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)))
        self._futures: dict[str, Future[PageRun]] = {}
        for page in pages:
            self._futures[page] = self._pool.submit(self._run, page, template, tmp_root)

    @staticmethod
    def _run(page: str, template: Path, tmp_root: Path) -> PageRun:
        if not any(b.lang in ("python", "py", "python3", "json", "toml") or b.title or b.runs_fastrag
                   for b in blocks_of(ROOT / page, page)):
            return PageRun()  # nothing to run or check: no need for a working directory
        base = tmp_root / re.sub(r"[^A-Za-z0-9]+", "_", page)
        shutil.copytree(template, base / "work")
        (base / "scripts").mkdir()
        return run_page(ROOT / page, page, base / "work", base / "scripts")

    def result(self, page: str) -> PageRun:
        return self._futures[page].result()

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)


@pytest.fixture(scope="session")
def page_runner(request: pytest.FixtureRequest, indexed_docs: Path, tmp_path_factory: pytest.TempPathFactory):
    selected = sorted({
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_page_code_runs" and hasattr(item, "callspec")
    })
    runner = PageRunner(selected, indexed_docs, tmp_path_factory.mktemp("pages"))
    yield runner
    runner.close()


@pytest.mark.parametrize("page", PAGES)
def test_page_code_runs(page: str, page_runner: PageRunner) -> None:
    """Every runnable block of the page runs as documented (docs/contributing.md)."""
    result = page_runner.result(page)
    assert not result.failures, f"{page}:\n\n" + "\n\n".join(result.failures)


# ------------------------------------------------------------------------------ the conventions themselves


def test_markers_and_fence_parsing(tmp_path: Path) -> None:
    """The runner itself: markers skip, gate and expect; file blocks are written; python blocks share names."""
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent("""\
            ```python
            greeting = 'hello'
            ```

            ```python
            print(greeting)
            ```

            <!-- ci: skip never runs -->
            ```python
            raise SystemExit(3)
            ```

            <!-- ci: needs FASTRAG_DOCS_TEST_UNSET_VARIABLE -->
            ```bash
            fastrag nonsense
            ```

            ```text title="notes/hello.txt"
            hello
            ```

            <!-- ci: exit 2 -->
            ```bash
            fastrag --no-such-option
            ```

            ````markdown
            ```bash
            fastrag nonsense inside an example of markdown
            ```
            ````
        """),
        encoding="utf-8",
    )
    blocks = blocks_of(page, "page.md")
    workdir, scripts = tmp_path / "work", tmp_path / "scripts"
    workdir.mkdir()
    scripts.mkdir()
    result = run_page(page, "page.md", workdir, scripts)
    assert [(b.lang, b.marker) for b in blocks] == [
        ("python", None),
        ("python", None),
        ("python", ("skip", "never runs")),
        ("bash", ("needs", "FASTRAG_DOCS_TEST_UNSET_VARIABLE")),
        ("text", None),
        ("bash", ("exit", "2")),
        ("markdown", None),
    ]
    assert not blocks[-1].runs_fastrag
    assert result.failures == []
    assert result.skipped == ["page.md:10: never runs", "page.md:15: needs FASTRAG_DOCS_TEST_UNSET_VARIABLE"]
    assert (workdir / "notes" / "hello.txt").read_text(encoding="utf-8") == "hello\n"
    if FASTRAG_SCRIPT.exists():
        assert result.ran == 2  # the two python blocks as one program, and the exit-2 shell block


# ------------------------------------------------------------------------------------------ docstrings


def _public_modules() -> list[str]:
    names = ["fastrag"]
    for info in pkgutil.walk_packages(fastrag.__path__, "fastrag."):
        if not any(part.startswith("_") for part in info.name.split(".")) and info.name != "fastrag.vector_store.sqlite.bm25_core":  # the compiled core: documented by its wrapper, fastrag.vector_store.sqlite.native
            names.append(info.name)
    return sorted(names)


MODULES = _public_modules()


def test_docstring_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``>>>`` example in a public docstring runs and prints what it shows."""
    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    found: set[str] = set()
    for name in MODULES:
        module = importlib.import_module(name)
        for test in finder.find(module):
            if test.examples:
                found.add(name)
                runner.run(test)
    outcome = runner.summarize(verbose=False)
    assert outcome.failed == 0, f"{outcome.failed} docstring example(s) failed; the report is above"
    assert {"fastrag", "fastrag.filters"} <= found  # the package's and the filter language's examples


_LITERAL_INTRO = re.compile(r"::\s*$")
# a line that only Python would have: an import, async/await, a definition
_CODE_LINE = re.compile(
    r"^\s*(?:from\s+\S+\s+import\b|import\s+\w|async\s+(?:with|for|def)\b|await\s|def\s|class\s)", re.MULTILINE
)


def _literal_blocks(docstring: str) -> list[str]:
    """The ``::`` literal blocks of an RST-flavoured docstring, dedented."""
    lines = docstring.expandtabs().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if _LITERAL_INTRO.search(lines[i]):
            indent = len(lines[i]) - len(lines[i].lstrip())
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            k = j
            while k < len(lines) and (not lines[k].strip() or len(lines[k]) - len(lines[k].lstrip()) > indent):
                k += 1
            if k > j:
                body = lines[j:k]
                margin = min(len(x) - len(x.lstrip()) for x in body if x.strip())
                blocks.append("\n".join(x[margin:] for x in body).strip("\n"))
            i = max(k, i + 1)
        else:
            i += 1
    return blocks


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))]
    out = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            out.append((getattr(node, "lineno", 1), doc))
    return out


def test_docstring_sketches_compile_and_import_what_exists() -> None:
    """A ``::`` block with Python statements compiles, and every name it imports from fastrag exists."""
    problems = []
    for path in sorted((ROOT / "fastrag").rglob("*.py")):
        for line, doc in _docstrings(path):
            for block in _literal_blocks(doc):
                where = f"{path.relative_to(ROOT)}:{line}"
                try:
                    tree = compile(block, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                except SyntaxError as exc:
                    if _CODE_LINE.search(block):
                        problems.append(f"{where}: a docstring example does not compile: {exc.msg}\n{block}")
                    continue  # otherwise a tree, a folder layout, a schema: text
                for node in ast.walk(tree):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fastrag":
                        try:
                            module = importlib.import_module(node.module)
                        except ImportError as exc:
                            problems.append(f"{where}: imports {node.module}, which fails: {exc}")
                            continue
                        for alias in node.names:
                            if not hasattr(module, alias.name) and importlib.util.find_spec(
                                f"{node.module}.{alias.name}"
                            ) is None:
                                problems.append(f"{where}: imports {alias.name} from {node.module}, which has none")
                    elif isinstance(node, ast.Import):
                        for alias in node.names:
                            if alias.name.split(".")[0] == "fastrag" and importlib.util.find_spec(alias.name) is None:
                                problems.append(f"{where}: imports {alias.name}, which does not exist")
    assert not problems, "\n\n".join(problems)


# ------------------------------------------------------------------------------------------------ site


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the docs tools)")
def test_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """``mkdocs build --strict``: no broken link or anchor, no missing page, every docstring reference resolves."""
    env = clean_env()
    env["NO_MKDOCS_2_WARNING"] = "1"  # Material's end-of-life banner, not a warning about the docs
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=TIMEOUT,
    )
    problems = [  # the warnings, with their continuation lines (a list of pages missing from the nav)
        line for line in proc.stderr.splitlines() if line.startswith(("WARNING", "ERROR", "Aborted", "  - "))
    ]
    assert proc.returncode == 0, "\n".join(problems) or _tail(proc.stderr)
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "api" / "filters" / "index.html").is_file()
    # issue 16.10: API signatures are formatted one parameter per line (mkdocstrings needs ruff or black,
    # which the docs extra installs), and every page loads the stylesheet that wraps long code lines
    page = (tmp_path / "site" / "api" / "ingestion" / "index.html").read_text(encoding="utf-8")
    signatures = [html.unescape(re.sub(r"<[^>]+>", "", body))
                  for body in re.findall(r'class="doc-signature highlight"><pre><span></span><code>(.*?)</code>', page, re.S)]  # fmt: skip
    pipeline = next(s for s in signatures if s.startswith("IngestionPipeline("))
    assert "\n    embedder: Embedder,\n" in pipeline, pipeline
    assert "stylesheets/extra.css" in page
    assert "white-space: pre-wrap" in (tmp_path / "site" / "stylesheets" / "extra.css").read_text(encoding="utf-8")


def test_the_docs_extra_installs_a_signature_formatter() -> None:
    docs_extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]["docs"]
    assert any(dep.split(">")[0].split("=")[0].strip() in ("ruff", "black") for dep in docs_extra)


def test_api_reference_covers_every_public_module() -> None:
    """Every public module is rendered in docs/api/ (so its docstrings are checked by the strict build)."""
    rendered = set()
    for page in (DOCS / "api").glob("*.md"):
        rendered |= set(re.findall(r"^:::\s+(fastrag[\w.]*)\s*$", page.read_text(encoding="utf-8"), re.MULTILINE))
    # the command line is documented from its click commands (docs/cli.md, mkdocs-click), not its modules
    missing = [name for name in MODULES if name not in rendered and name != "fastrag.cli" and not name.startswith("fastrag.cli.")]
    assert not missing, f"add these modules to a page under docs/api/ (and mkdocs.yml's nav): {missing}"
