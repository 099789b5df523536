"""Packaging promises: ``import fastrag`` needs no extra and loads no backend SDK or model library; a missing
extra is reported with the exact install command; the ``fastrag`` command is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import entry_points, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

OPTIONAL = ["model2vec", "pymilvus", "milvus_lite", "qdrant_client", "chromadb", "opensearchpy", "psycopg",
            "psycopg_pool", "pgvector", "cohere", "torch", "sentence_transformers", "lingua", "fastapi", "starlette",
            "uvicorn", "prometheus_client", "langchain_core", "langchain_tests", "llama_index", "haystack", "mcp"]

# Installed first in sys.meta_path of a fresh interpreter. Every attempt to import one of OPTIONAL is
# recorded and fails, the way an import of a package that is installed but broken fails.
BLOCKER = textwrap.dedent(
    f"""
    import importlib.abc, importlib.machinery, sys

    BLOCKED = set({OPTIONAL!r})
    ATTEMPTS = []

    class _Refuse(importlib.abc.Loader):
        def create_module(self, spec):
            raise ModuleNotFoundError(f"No module named {{spec.name!r}} (blocked by the test)", name=spec.name)

        def exec_module(self, module):
            raise AssertionError("unreachable")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                ATTEMPTS.append(name)
                return importlib.machinery.ModuleSpec(name, _Refuse())
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_import_fastrag_needs_and_loads_no_optional_package() -> None:
    code = BLOCKER + textwrap.dedent(
        """
        import fastrag
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not ATTEMPTS and not loaded, (ATTEMPTS, loaded)
        import fastrag.cli, fastrag.config, fastrag.retrieval, fastrag.vector_store.sqlite, fastrag.ingestion
        import fastrag.evaluation, fastrag.filters, fastrag.models, fastrag.errors
        import fastrag.integrations, fastrag.integrations.bridge  # the adapters' package loads no framework
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not ATTEMPTS and not loaded, (ATTEMPTS, loaded)
        print("ok")
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


STORES = {  # exported name -> (the SDK packages it needs, the extra, how to build one without a server)
    "SQLiteVectorStore": ((), None, "SQLiteVectorStore(':memory:')"),
    "MilvusVectorStore": (("pymilvus", "milvus_lite"), "milvus", "MilvusVectorStore.from_url('milvus://127.0.0.1:1/x')"),
    "QdrantVectorStore": (("qdrant_client",), "qdrant", "QdrantVectorStore(location=':memory:')"),
    "ChromaVectorStore": (("chromadb",), "chroma", "ChromaVectorStore(path=TMP)"),
    "OpenSearchVectorStore": (("opensearchpy",), "opensearch", "OpenSearchVectorStore(url='http://127.0.0.1:1')"),
    "PgVectorStore": (("psycopg", "psycopg_pool", "pgvector"), "postgres", "PgVectorStore('postgresql://127.0.0.1:1/x')"),
}


def test_every_store_is_exported_lazily_and_needs_no_extra_to_import() -> None:
    names = ", ".join(STORES)
    code = BLOCKER + textwrap.dedent(
        f"""
        import tempfile
        from fastrag.vector_store import {names}
        from fastrag.errors import ConfigurationError
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not ATTEMPTS and not loaded, (ATTEMPTS, loaded)
        TMP = tempfile.mkdtemp()
        for name, build in {[(n, b) for n, (_, extra, b) in STORES.items() if extra]!r}:
            try:
                eval(build)
            except ConfigurationError as exc:  # the SDK loads on first use, and says what to install
                print(name, exc)
            else:
                raise SystemExit(f"{{name}} was built without its SDK")
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    for name, (_, extra, _) in STORES.items():
        if extra:
            assert f'{name} ' in result.stdout and f'pip install "fastrag-retrieval[{extra}]"' in result.stdout, (
                name, result.stdout)


def test_using_one_store_never_loads_another_stores_sdk() -> None:
    import importlib.util

    sdks = sorted({sdk for packages, _, _ in STORES.values() for sdk in packages})
    for name, (own, extra, build) in STORES.items():
        if any(importlib.util.find_spec(sdk) is None for sdk in own):
            continue  # its extra is not installed here
        code = textwrap.dedent(
            f"""
            import sys, tempfile
            TMP = tempfile.mkdtemp()
            from fastrag.vector_store import {name}
            store = {build}
            print(sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in {sdks!r}))
            """
        )
        result = run_python(code)
        assert result.returncode == 0, (name, result.stderr)
        loaded = set(eval(result.stdout.strip().splitlines()[-1]))
        assert loaded <= set(own), (name, loaded - set(own))


def test_a_broken_core_model_reader_is_reported_with_the_reinstall_command() -> None:
    # the shipped model is read with tokenizers and safetensors, core dependencies: missing, the install is broken
    code = BLOCKER + textwrap.dedent(
        """
        BLOCKED.update({"tokenizers", "safetensors"})
        import anyio
        from fastrag.errors import ConfigurationError
        from fastrag.ingestion import Model2VecEmbedder

        try:
            anyio.run(Model2VecEmbedder().embed_query, "hello")
        except ConfigurationError as exc:
            print(exc)
        else:
            raise SystemExit("no error")
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert 'pip install --force-reinstall "fastrag-retrieval"' in result.stdout


def test_a_hub_model_without_model2vec_is_reported_with_the_install_command() -> None:
    # sys.modules[name] = None is how Python marks a module as absent: find_spec gives None, import fails
    code = textwrap.dedent(
        """
        import sys
        sys.modules["model2vec"] = None
        from fastrag.errors import ConfigurationError
        from fastrag.config import open_embedder

        try:
            open_embedder("minishlab/potion-base-8M")
        except ConfigurationError as exc:
            print(exc)
        else:
            raise SystemExit("no error")
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "minishlab/potion-base-8M" in result.stdout
    assert 'pip install "fastrag-retrieval[model2vec]"' in result.stdout


def test_the_default_install_indexes_and_searches_in_hybrid_mode(tmp_path: Path) -> None:
    # issue 16.5: with every optional package absent (model2vec included), `fastrag index` and the default
    # (hybrid) `fastrag search` work with the shipped model
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "volcano.md").write_text("# Volcano\n\nVolcanoes erupt molten lava.\n", encoding="utf-8")
    (tmp_path / "notes" / "tea.md").write_text("# Tea\n\nGreen tea is steeped briefly.\n", encoding="utf-8")
    code = BLOCKER + textwrap.dedent(
        f"""
        import os
        os.chdir({str(tmp_path)!r})
        from fastrag.cli import main
        for argv in (["index", "notes"], ["search", "molten lava", "--json"]):
            try:
                main(argv, prog_name="fastrag")
            except SystemExit as exit_:
                assert exit_.code in (0, None), (argv, exit_.code)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not ATTEMPTS and not loaded, (ATTEMPTS, loaded)
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout[result.stdout.index("{"):])
    assert found["mode"] == "hybrid"
    assert found["documents"][0]["metadata"]["source_uri"] == "notes/volcano.md"
    assert set(found["documents"][0]["metadata"]["branches"]) == {"vector", "bm25"}


def test_the_shipped_models_readers_are_core_dependencies() -> None:
    # what the default model path imports must come with `pip install fastrag-retrieval`, no extra
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    core = {re.split(r"[<>=!~\[ ]", dep, maxsplit=1)[0].lower() for dep in pyproject["project"]["dependencies"]}
    assert {"safetensors", "tokenizers"} <= core
    assert "model2vec" not in core


INSTALL_COMMAND = re.compile(r"pip install\s+(?:--?[\w-]+\s+)*[\"']?(\.|[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)(?:\[([^\]]*)\])?")


def test_every_install_hint_names_our_distribution_and_a_declared_extra() -> None:
    # issue 16.1: `pip install "fastrag[...]"` installs Intel Labs' unrelated fastRAG; every hint in the package,
    # the docs and the README must name the distribution pyproject.toml declares, with an extra it declares
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name, extras = project["name"], set(project["optional-dependencies"])
    files = [*sorted((ROOT / "fastrag").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    ours = 0
    for path in files:
        for match in INSTALL_COMMAND.finditer(path.read_text(encoding="utf-8")):
            package, wanted = match.group(1), match.group(2)
            where = f"{path.relative_to(ROOT)}: {match.group(0)!r}"
            if package.lower().startswith("fastrag") or (package == "." or package.startswith("-e")):
                ours += 1
                assert package in (name, "."), f"{where} names {package!r}, not {name!r}"
                for extra in filter(None, (e.strip() for e in (wanted or "").split(","))):
                    assert extra in extras, f"{where}: no extra {extra!r} in pyproject.toml"
    assert ours >= 10  # the hints are there to check (the adapters' and the docs')


def test_keyword_search_from_the_cli_works_without_model2vec(tmp_path: Path) -> None:
    # BM25 needs no model: index a folder through the library with a fake embedder, then search
    # it from the command line with model2vec missing.
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "volcano.md").write_text("# Volcano\n\nVolcanoes erupt molten lava.\n", encoding="utf-8")
    code = textwrap.dedent(
        f"""
        import os, sys
        os.chdir({str(tmp_path)!r})
        import anyio
        from fastrag.ingestion import IngestionPipeline
        from fastrag.testing.fakes import HashingEmbedder
        from fastrag.vector_store.sqlite import SQLiteVectorStore

        async def index():
            async with HashingEmbedder() as embedder, SQLiteVectorStore("store.db") as store:
                await IngestionPipeline(embedder=embedder, vector_store=store).run(["notes"])

        anyio.run(index)
        sys.modules["model2vec"] = None
        from fastrag.cli import main
        sys.argv = ["fastrag", "search", "lava", "--mode", "keyword", "--store", "store.db"]
        main()
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "notes/volcano.md" in result.stdout


def test_the_fastrag_command_is_declared_and_installed() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"] == {"fastrag": "fastrag.cli:main"}
    (script,) = entry_points(group="console_scripts", name="fastrag")
    from fastrag.cli import main

    assert script.load() is main


def test_version_is_the_same_everywhere() -> None:
    import fastrag

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert fastrag.__version__ == pyproject["project"]["version"] == version("fastrag-retrieval")
    result = subprocess.run([sys.executable, "-m", "fastrag.cli", "--version"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    assert fastrag.__version__ in result.stdout


def _self_extras(deps: list[str]) -> set[str]:
    """The extras of fastrag itself that a list of requirements pulls in: "fastrag-retrieval[a,b]" -> {"a", "b"}."""
    found: set[str] = set()
    for dep in deps:
        if dep.startswith("fastrag-retrieval["):
            found.update(name.strip() for name in dep[len("fastrag-retrieval["):dep.index("]")].split(","))
    return found


def test_every_backend_extra_is_declared_and_all_includes_them() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(dep.startswith("model2vec") for dep in extras["model2vec"])
    backends = {"model2vec", "opensearch", "qdrant", "chroma", "milvus", "postgres"} & set(extras)
    assert "postgres" in backends
    assert "model2vec" in backends
    assert backends <= _self_extras(extras["all"])
    # the test extra is what .ci/run installs; it must bring every extra so every contract runs in CI
    assert _self_extras(extras["test"]) & {"all", "model2vec"}


def test_the_shipped_model_lives_inside_the_package() -> None:
    from fastrag.ingestion import DEFAULT_MODEL

    import fastrag

    package = Path(fastrag.__file__).resolve().parent
    assert DEFAULT_MODEL.resolve().is_relative_to(package)
    assert (DEFAULT_MODEL / "model.safetensors").stat().st_size > 1_000_000  # real weights, not an LFS pointer


def test_the_language_detector_imports_from_fastrag_retrieval_without_loading_lingua() -> None:
    # issue 16.3: the original retrieval docs import it from fastrag.retrieval; importing it must not load Lingua
    code = BLOCKER + textwrap.dedent(
        """
        from fastrag.retrieval import LinguaLanguageDetector
        import fastrag.language
        assert LinguaLanguageDetector is fastrag.language.LinguaLanguageDetector
        import fastrag.retrieval
        assert "LinguaLanguageDetector" in fastrag.retrieval.__all__ and "LinguaLanguageDetector" in dir(fastrag.retrieval)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not ATTEMPTS and not loaded, (ATTEMPTS, loaded)
        print("ok")
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


ADAPTERS = {  # adapter module -> (the framework package it needs, the extra)
    "fastrag.integrations.langchain": ("langchain_core", "langchain"),
    "fastrag.integrations.llama_index": ("llama_index", "llama-index"),
    "fastrag.integrations.haystack": ("haystack", "haystack"),
}


def test_an_adapter_without_its_framework_names_the_extra_to_install() -> None:
    # issue 27.8: importing an adapter whose framework is missing is an ImportError with the pip install line
    code = BLOCKER + textwrap.dedent(
        f"""
        import importlib
        for module, (package, extra) in {ADAPTERS!r}.items():
            try:
                importlib.import_module(module)
            except ImportError as exc:
                print(module, "|", exc)
            else:
                raise SystemExit(module + " imported without " + package)
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    for module, (_, extra) in ADAPTERS.items():
        line = next(line for line in result.stdout.splitlines() if line.startswith(module + " |"))
        assert f'pip install "fastrag-retrieval[{extra}]"' in line, line


def test_each_framework_extra_names_its_minimum_version_and_the_test_extra_brings_them() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for extra, distribution in (("langchain", "langchain-core"), ("llama-index", "llama-index-core"),
                                ("haystack", "haystack-ai")):  # fmt: skip
        (requirement,) = extras[extra]
        assert re.fullmatch(rf"{distribution}>=\d+(\.\d+)*,<\d+(\.\d+)*", requirement), requirement
    assert _self_extras(extras["integrations"]) == {"langchain", "llama-index", "haystack"}
    assert "integrations" in _self_extras(extras["test"])
    assert any(dep.startswith("langchain-tests>=") for dep in extras["test"])
