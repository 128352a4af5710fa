"""Every code block of the user documentation runs, so examples cannot rot.

Scanned: README.md, CONTRIBUTING.md and docs/**/*.md.

- A ```python block runs as a script of its own, in a fresh interpreter whose working
  directory is a new temporary directory (so relative store paths never collide), and must exit
  0 within the timeout. A block that is not meant to run standalone is preceded by the line
  ``<!-- no-run: reason -->``; those are counted, and more than ``MAX_NO_RUN`` fails.
- A ```sh block must parse (``bash -n``), every command it runs must be one the docs are allowed
  to use (``SH_COMMANDS``) or a script of the repository that exists, each repository path it
  names must exist, and each ``mqlite`` subcommand must be one the CLI has.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NO_RUN = re.compile(r"<!--\s*no-run:\s*(?P<reason>\S.*?)\s*-->")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
MAX_NO_RUN = 3
TIMEOUT_S = 60

# Commands a shell block may run (first word of each pipeline stage). Tools that CI installs
# (cargo, maturin, mkdocs) need not be on this machine's PATH, so presence is not checked.
SH_COMMANDS = {
    ".", "source", "cd", "export", "for", "do", "done", "mkdir", "rm", "ls", "cat", "echo",
    "python", "python3", "pip", "pytest", "mypy", "maturin", "mkdocs", "cargo", "rustup",
    "mqlite", "bash", "git", "redis-server", "sudo", "apt-get",
}
# Tokens that look like repository paths: checked to exist (globs and URLs excepted).
REPO_PATH = re.compile(r"^(?:\./)?(?:[\w.-]+/)+[\w.*-]+$|^\S+\.(?:py|sh|md|txt|toml|yml)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    no_run: str | None  # the reason given by a no-run marker on the line before, if any

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = len(m["indent"]), m["lang"], i
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^ {{0,{indent}}}```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i].startswith(" " * indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = NO_RUN.search(prev)
        out.append(Block(path, start + 1, lang, "\n".join(body) + "\n",
                         marker["reason"] if marker else None))
    return out


ALL_BLOCKS = [b for f in doc_files() for b in blocks_of(f)]
PYTHON = [b for b in ALL_BLOCKS if b.lang == "python"]
SHELL = [b for b in ALL_BLOCKS if b.lang in ("sh", "bash", "shell", "console")]


def test_the_docs_have_examples_and_few_are_exempt() -> None:
    assert len(PYTHON) >= 10, [b.id for b in PYTHON]
    exempt = [b for b in PYTHON if b.no_run is not None]
    assert len(exempt) <= MAX_NO_RUN, f"too many no-run blocks: {[b.id for b in exempt]}"
    for b in ALL_BLOCKS:
        # A marker applies to a python block only; anywhere else it is a mistake.
        assert b.no_run is None or b.lang == "python", f"{b.id}: no-run marker on a {b.lang} block"


@pytest.mark.parametrize("block", [b for b in PYTHON if b.no_run is None], ids=lambda b: b.id)
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    work = tmp_path / "cwd"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script)],
        cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout}\n{done.stderr}"


def _commands(code: str) -> list[list[str]]:
    """The words of each simple command of a shell block (comments dropped, lines joined)."""
    joined = code.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError as exc:
            raise AssertionError(f"cannot split {line!r}: {exc}") from None
        current: list[str] = []
        for w in words + [";"]:
            if w in (";", "&&", "||", "|", "&"):
                if current:
                    out.append(current)
                current = []
            else:
                current.append(w)
    return out


def _mqlite_subcommands() -> set[str]:
    from mqlite.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return set(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.id)
def test_shell_block_is_valid(block: Block) -> None:
    parsed = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True,
                            check=False)
    assert parsed.returncode == 0, f"{block.id}: {parsed.stderr}"
    subcommands = _mqlite_subcommands()
    for words in _commands(block.code):
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value prefixes
        if not words:
            continue
        cmd = words[0]
        if "/" in cmd:
            assert (ROOT / cmd).is_file(), f"{block.id}: {cmd} does not exist"
        else:
            assert cmd in SH_COMMANDS, f"{block.id}: unexpected command {cmd!r}"
        if cmd == "mqlite":
            assert len(words) > 1 and words[1] in subcommands | {"--help", "-h"}, (
                f"{block.id}: mqlite has no subcommand {words[1:2]}"
            )
        for w in words[1:]:
            if w.startswith("-") or "*" in w or "://" in w or "$" in w or "<" in w:
                continue
            if REPO_PATH.match(w) and (w.endswith((".py", ".sh", ".txt", ".toml", ".yml"))
                                       or w.startswith(("scripts/", "benches/", "tests/",
                                                        "docs/", "examples/", "fuzz/"))):
                assert (ROOT / w).exists(), f"{block.id}: {w} does not exist"


def test_design_page_shows_the_crate_layer_diagram() -> None:
    """docs/design.md repeats the layer diagram of rust/core/lib.rs, which tests/layering.rs
    enforces; the copy must not drift from it."""
    lib = (ROOT / "rust" / "core" / "lib.rs").read_text(encoding="utf-8")
    doc = lib.split("//! ```text\n", 1)[1].split("//! ```", 1)[0]
    diagram = "".join(line[4:] + "\n" if line.startswith("//! ") else "\n"
                      for line in doc.splitlines())
    texts = [b.code for b in blocks_of(ROOT / "docs" / "design.md") if b.lang == "text"]
    assert diagram in texts
