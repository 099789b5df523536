"""Build hook: compiles fastrag's native BM25 core (native/bm25_core.cpp, a pybind11 extension) into
fastrag/vector_store/sqlite/ when a wheel, or an editable install, is built.

It never fails the install: without a C++ compiler (or on a platform this hook does not know how to link
for), it says so once and the package installs as pure Python, whose BM25 search uses the numpy path
(fastrag.vector_store.sqlite.native). ``FASTRAG_BUILD_NATIVE=0`` skips the compile on purpose. The compile
is one g++ call (about 10 s on these 2-core machines); an editable reinstall whose built module is newer
than its source skips it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("native") / "bm25_core.cpp"
PACKAGE_DIR = Path("fastrag") / "vector_store" / "sqlite"
MODULE = "bm25_core"


class NativeCoreBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        if os.environ.get("FASTRAG_BUILD_NATIVE", "1") == "0":
            self.app.display_info("fastrag: FASTRAG_BUILD_NATIVE=0: the native BM25 core is not built (numpy path)")
            return
        root = Path(self.root)
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        name = MODULE + suffix
        try:
            if version == "editable":  # the editable install imports from the source tree: build it there
                target = root / PACKAGE_DIR / name
                if not (target.exists() and target.stat().st_mtime >= (root / SOURCE).stat().st_mtime):
                    _compile(root / SOURCE, target)
            else:
                target = Path(tempfile.mkdtemp(prefix="fastrag-native-")) / name
                _compile(root / SOURCE, target)
                build_data["force_include"][str(target)] = str(PACKAGE_DIR / name)
        except Exception as exc:  # noqa: BLE001 - any failure leaves a working pure-Python install
            self.app.display_warning(
                f"fastrag: the native BM25 core was not built ({type(exc).__name__}: {exc}); installing without "
                "it: BM25 search uses the numpy path (the same results, slower at scale, holds the GIL). "
                "Install a C++ compiler (g++ or clang++) and reinstall to build it."
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self.app.display_info(f"fastrag: built the native BM25 core ({target.name})")


def _compile(source: Path, target: Path) -> None:
    import pybind11  # a build requirement (pyproject.toml [build-system])

    if sys.platform == "win32":
        raise RuntimeError("this hook does not build with MSVC yet")
    compiler = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
    if not shutil.which(compiler[0]):
        raise RuntimeError(f"no C++ compiler ({compiler[0]!r} not found)")
    flags = ["-O3", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden",
             f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}"]  # fmt: skip
    if sys.platform == "darwin":
        flags += ["-undefined", "dynamic_lookup"]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".tmp")
    done = subprocess.run([*compiler, *flags, str(source), "-o", str(partial)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(compiler)} failed: {done.stderr.strip()[-2000:]}")
    partial.replace(target)
