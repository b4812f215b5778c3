"""The code blocks of README.md and docs/ that show printed output are run, and their output checked.

A page marks a block with an HTML comment on the line before it (invisible on the site and on
GitHub):

- ``<!-- check: python -->`` before a ```` ```python ```` block: the block runs as a program
  (``python example.py``), and the ```` ```text ```` block right after it is what it prints.
- ``<!-- check: console -->`` before a ```` ```console ```` block: each ``$ `` line is a shell
  command (``python`` and ``shapewatch`` are the interpreter under test), and the lines after it,
  up to the next ``$ `` line, are what it prints.
- ``<!-- check: exempt: REASON -->`` before a ```` ```text ```` or ```` ```console ```` block:
  not checked, for the reason given (the timing tables quoted from ``make bench``).

Options follow the kind, comma-separated: ``excerpt`` (the block is a contiguous part of the
output), ``stdout`` (compare standard output only; by default stdout and stderr are read
together, as a terminal shows them), ``file NAME`` (the program's file name, default
``example.py``), ``env NAME=VALUE`` (for a python block), ``status N`` (the block's program, or its last command, exits with status N; every other
exits with 0), ``one-command`` (a console block whose program itself
prints ``$ `` lines: only its first line is a command), ``drop TEXT`` (printed lines that start
with TEXT, after their indentation, are left out: the noise warnings a busy machine adds to a
timing), ``jax X.Y`` (printed on that jax
release: checked only there, skipped elsewhere), ``exact durations`` (the durations are computed
from the numbers the program gives, not measured: they are compared as printed).

Every program runs in a fresh directory holding a copy of ``examples/`` and a link to the
``shapewatch`` package, so paths print as they do from the repository root. Before comparing,
both sides are normalised, and nothing else is:

- a duration (a number followed by ``ns``, ``us``, ``ms`` or ``s``) becomes ``<time>``, unless
  the block says ``exact durations``;
- a memory address (``0x7fc7a956f420``) becomes ``0x<addr>``;
- the run directory's absolute path is taken off the paths under it (``train.py:4``), as the
  pages say where they shorten paths;
- the compiles outside watched functions (``Outside watched functions: 2 compiles, ... (jit(a) 1,
  jit(b) 1)``) are listed by seconds, an order that changes from run to run: their items are
  compared in sorted order; on jax before 0.7, which names no function in its monitoring events
  (the list reads ``<unnamed> 2``), the list is not compared, only the count and the time;
- runs of spaces become one space, and trailing spaces go;
- in the expected text, a line that is only ``...`` matches any number of lines, and ``...``
  inside a line matches any text (as doctest's ELLIPSIS).

Every ```` ```text ```` and ```` ```console ```` block, and every ```` ```python ```` block that
calls ``print(``, must be checked or exempt: a new block without a marker fails
``test_every_output_block_is_checked_or_exempt``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!--\s*check:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(`{3,})(\S*)")
TIMEOUT_S = 180


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str


@dataclasses.dataclass
class Check:
    kind: str  # python, console, exempt
    options: list[str]
    code: Block
    output: Block | None  # the expected output of a python block

    @property
    def name(self) -> str:
        page = self.code.page
        return f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}:{self.code.line}"

    def option(self, key: str) -> str | None:
        for o in self.options:
            if o == key or o.startswith(key + " "):
                return o[len(key):].strip() or key
        return None


def _blocks(page: Path) -> list[tuple[str | None, Block]]:
    """Every fenced block of a page, with the check marker on the line before it (if any)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[tuple[str | None, Block]] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        before = lines[i - 1] if i else ""
        marker = MARKER.match(before)
        found.append((marker.group(1) if marker else None,
                      Block(page, i + 1, lang, "\n".join(lines[i + 1:j]))))
        i = j + 1
    return found


def _prints(block: Block) -> bool:
    return block.lang == "python" and "print(" in block.text


def _checks(pages: list[Path] = PAGES) -> tuple[list[Check], list[Block]]:
    """The checks of every page, and the output blocks (or printing programs) that no check covers."""
    checks: list[Check] = []
    unmarked: list[Block] = []
    for page in pages:
        blocks = _blocks(page)
        covered: set[int] = set()
        for k, (marker, block) in enumerate(blocks):
            if marker is None:
                if (block.lang in ("text", "console") or _prints(block)) and k not in covered:
                    unmarked.append(block)
                continue
            kind, _, rest = marker.partition(",")
            kind = kind.strip()
            options = [o.strip() for o in rest.split(",") if o.strip()]
            if kind.startswith("exempt"):
                checks.append(Check("exempt", [kind], block, None))
            elif kind == "python":
                nxt = blocks[k + 1][1] if k + 1 < len(blocks) else None
                if block.lang != "python" or nxt is None or nxt.lang != "text":
                    raise ValueError(f"{page}:{block.line}: 'check: python' needs a python block "
                                     "followed by a text block")
                covered.add(k + 1)
                checks.append(Check("python", options, block, nxt))
            elif kind == "console":
                if block.lang != "console":
                    raise ValueError(f"{page}:{block.line}: 'check: console' needs a console block")
                checks.append(Check("console", options, block, None))
            else:
                raise ValueError(f"{page}:{block.line}: unknown check {marker!r}")
    return checks, unmarked


CHECKS, UNMARKED = _checks()
RUNNABLE = [c for c in CHECKS if c.kind != "exempt"]

_DURATION = re.compile(r"(?<!\w)(?<!\d\.)\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?\s?(?:ns|us|µs|ms|s)\b")
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")
_UNWATCHED = re.compile(r"^(Outside watched functions: .*?)\((.*)\)$")


JAX_NAMES_EVENTS = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 7)


def normalise(text: str, workdir: Path | None = None, durations: bool = True) -> list[str]:
    """The lines of a text with durations (unless ``durations=False``), addresses and spacing made comparable."""
    if workdir is not None:
        text = text.replace(f"{workdir}{os.sep}", "")
    out = []
    for line in text.strip("\n").splitlines():
        if durations:
            line = _DURATION.sub("<time>", line)
        line = _ADDRESS.sub("0x<addr>", line)
        unwatched = _UNWATCHED.match(line)
        if unwatched:
            items = sorted(unwatched.group(2).split(", ")) if JAX_NAMES_EVENTS else ["..."]
            line = f"{unwatched.group(1)}({', '.join(items)})"
        out.append(re.sub(r" {2,}", " ", line.rstrip()))
    return out


def matches(expected: list[str], actual: list[str], excerpt: bool = False) -> bool:
    """Whether the actual lines fit the expected ones (``...`` lines and ``...`` in lines are wildcards)."""
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\\n]*?".join(map(re.escape, line.split("..."))) + r"\n")
    pattern = "".join(parts)
    if excerpt:
        pattern = r"(?:[^\n]*\n)*?" + pattern + r"(?:[^\n]*\n)*?"
    return re.fullmatch(pattern, "".join(a + "\n" for a in actual), re.DOTALL) is not None


def _workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory holding examples/ and the package, and the environment to run in it."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "shapewatch").symlink_to(ROOT / "shapewatch", target_is_directory=True)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    for name, line in (("python", f'exec "{sys.executable}" "$@"'),
                       ("shapewatch", f'exec "{sys.executable}" -m shapewatch "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHAPEWATCH")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    # PYTHONUNBUFFERED: the pages show what a terminal shows, where stdout is line-buffered and
    # interleaves with stderr in the order printed; into a pipe, stdout would come out at exit.
    env.update(PYTHONHASHSEED="0", COLUMNS="100", NO_COLOR="1", PYTHONUNBUFFERED="1")
    return tmp_path, env


_SAME_COMMAND: dict[tuple[str, bool], tuple[str, int]] = {}
_SAME_PROGRAM: dict[tuple[str, str], tuple[str, int]] = {}


def _run(command: list[str] | str, cwd: Path, env: dict[str, str], stdout_only: bool) -> tuple[str, int]:
    """What a command prints (its run directory taken off the paths), and its exit status."""
    proc = subprocess.run(command, cwd=cwd, env=env, shell=isinstance(command, str),
                          stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL if stdout_only else subprocess.STDOUT,
                          text=True, timeout=TIMEOUT_S, executable="/bin/bash" if isinstance(command, str) else None)
    return proc.stdout.replace(f"{cwd}{os.sep}", ""), proc.returncode


def _console_steps(text: str, one_command: bool = False) -> list[tuple[str, list[str]]]:
    """The commands of a console block, each with the lines it prints."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ ") and not (one_command and steps):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise ValueError(f"a console block must start with a '$ ' command, not {line!r}")
    return steps


def _compare(check: Check, where: str, expected: str, actual: str, workdir: Path) -> None:
    drop = check.option("drop")
    if drop is not None:
        actual = "\n".join(line for line in actual.splitlines() if not line.lstrip().startswith(drop))
    durations = check.option("exact durations") is None
    want, got = normalise(expected, durations=durations), normalise(actual, workdir, durations)
    if not matches(want, got, excerpt=check.option("excerpt") is not None):
        diff = "\n".join(difflib.unified_diff(want, got, "the page", "printed", lineterm=""))
        pytest.fail(f"{where}: the output differs from the page (normalised; see tests/test_docs.py):\n"
                    f"{diff}\n\nprinted:\n{actual}")


@pytest.mark.slow
@pytest.mark.parametrize("check", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_code_block_prints_what_the_page_shows(check: Check, tmp_path: Path) -> None:
    version = check.option("jax")
    if version is not None and not jax.__version__.startswith(version):
        pytest.skip(f"printed on jax {version}; jax {jax.__version__} is installed")
    _verify(check, tmp_path)


def _status(check: Check, where: str, status: int, last: bool) -> None:
    expected = int(check.option("status") or 0) if last else 0
    if status != expected:
        pytest.fail(f"{where}: exited with status {status}; the page expects {expected} "
                    "(a block that ends in an error says 'status N')")


def _verify(check: Check, tmp_path: Path) -> None:
    """Runs a check's program or commands and compares what they print with the page."""
    cwd, env = _workdir(tmp_path)
    stdout_only = check.option("stdout") is not None
    if check.kind == "python":
        name = check.option("file") or "example.py"
        (cwd / name).write_text(check.code.text + "\n")
        for o in check.options:
            if o.startswith("env "):
                var, _, value = o[4:].partition("=")
                env[var.strip()] = value.strip()
        key = (check.code.text, " ".join(check.options))
        if key not in _SAME_PROGRAM:  # the README's example is also on two pages: it runs once
            _SAME_PROGRAM[key] = _run([sys.executable, name], cwd, env, stdout_only)
        actual, status = _SAME_PROGRAM[key]
        assert check.output is not None
        _compare(check, check.name, check.output.text, actual, cwd)
        _status(check, check.name, status, last=True)
        return
    steps = _console_steps(check.code.text, check.option("one-command") is not None)
    for i, (command, expected) in enumerate(steps):
        key = (command, stdout_only)
        if len(steps) == 1 and key in _SAME_COMMAND:  # one program shown in two excerpts runs once
            actual, status = _SAME_COMMAND[key]
        else:
            actual, status = _run(command, cwd, env, stdout_only)
            if len(steps) == 1:
                _SAME_COMMAND[key] = actual, status
        _compare(check, f"{check.name}: $ {command}", "\n".join(expected), actual, cwd)
        _status(check, f"{check.name}: $ {command}", status, last=i == len(steps) - 1)


def test_a_page_whose_output_no_longer_matches_fails(tmp_path: Path) -> None:
    check = next(c for c in RUNNABLE if c.kind == "python" and "propose(obs" in c.code.text)
    assert check.output is not None and "padding 21%" in check.output.text
    cwd, env = _workdir(tmp_path)
    (cwd / "example.py").write_text(check.code.text + "\n")
    actual, _ = _run([sys.executable, "example.py"], cwd, env, stdout_only=False)
    _compare(check, check.name, check.output.text, actual, cwd)
    with pytest.raises(pytest.fail.Exception, match="differs from the page"):
        _compare(check, check.name, check.output.text.replace("padding 21%", "padding 22%"), actual, cwd)


def test_a_program_that_fails_after_printing_what_the_page_shows_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- check: python, stdout -->\n```python\nprint('done')\nraise SystemExit(1)\n```\n"
                    "```text\ndone\n```\n")
    (check,), _ = _checks([page])
    with pytest.raises(pytest.fail.Exception, match="exited with status 1; the page expects 0"):
        _verify(check, tmp_path / "run")
    check.options.append("status 1")
    _verify(check, tmp_path / "again")


def test_a_computed_duration_that_changes_fails(tmp_path: Path) -> None:
    check = next(c for c in RUNNABLE if c.kind == "python" and "propose(obs" in c.code.text)
    assert check.output is not None and "+0.77 s" in check.output.text
    assert check.option("exact durations") is not None
    cwd, env = _workdir(tmp_path)
    (cwd / "example.py").write_text(check.code.text + "\n")
    actual, _ = _run([sys.executable, "example.py"], cwd, env, stdout_only=False)
    _compare(check, check.name, check.output.text, actual, cwd)
    with pytest.raises(pytest.fail.Exception, match="differs from the page"):
        _compare(check, check.name, check.output.text.replace("+0.77 s", "+7.7 s"), actual, cwd)


def test_every_output_block_is_checked_or_exempt() -> None:
    where = [f"{b.page.relative_to(ROOT)}:{b.line}" for b in UNMARKED]
    assert not where, ("these text/console blocks or printing python blocks have no '<!-- check: ... -->' marker "
                       f"(see tests/test_docs.py): {where}")


def test_a_printing_program_without_a_marker_is_unchecked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Run it:\n\n```python\nprint(1 + 1)\n```\n\n```python\nx = 1\n```\n")
    checks, unmarked = _checks([page])
    assert not checks and [b.line for b in unmarked] == [3]


def test_exempt_blocks_say_why() -> None:
    bare = [c.name for c in CHECKS if c.kind == "exempt" and not c.options[0].partition(":")[2].strip()]
    assert not bare, f"'<!-- check: exempt: REASON -->' needs its reason: {bare}"


def test_normalising_keeps_everything_but_durations_and_addresses() -> None:
    assert normalise("#1  compile  a.py:3 first compile  (88.5 ms)") == ["#1 compile a.py:3 first compile (<time>)"]
    assert normalise("18 compiles, 6.6 s; 4 values in [21, 131]") == ["18 compiles, <time>; 4 values in [21, 131]"]
    assert (normalise("Outside watched functions: 2 compiles, 0.2 s (jit(b) 1, jit(a) 1)")
            == normalise("Outside watched functions: 2 compiles, 0.3 s (jit(a) 1, jit(b) 1)"))
    assert normalise("p10..p90 393 us..890 us") == ["p10..p90 <time>..<time>"]
    assert not matches(normalise("4 compiles (1.0 s)"), normalise("5 compiles (2.0 s)"))


def test_ellipsis_lines_match_any_lines_and_nothing_else_is_loose() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert matches(["b"], ["a", "b", "c"], excerpt=True)
    assert not matches(["b"], ["a", "b", "c"])


def test_every_public_name_has_an_api_reference_entry() -> None:
    import shapewatch
    import shapewatch.buckets

    api = (ROOT / "docs/reference/api.md").read_text()
    api_buckets = (ROOT / "docs/reference/api-buckets.md").read_text()
    missing = [f"shapewatch.{n}" for n in shapewatch.__all__
               if n not in ("__version__", "buckets") and f"::: shapewatch.{n}\n" not in api]
    missing += [f"shapewatch.buckets.{n}" for n in shapewatch.buckets.__all__
                if f"::: shapewatch.buckets.{n}\n" not in api_buckets]
    assert not missing, f"add '::: NAME' to docs/reference/api*.md for: {missing}"


def test_docstring_examples_render_as_code_without_literal_fences() -> None:
    griffe = pytest.importorskip("griffe")
    markdown = pytest.importorskip("markdown")
    ext = griffe.load_extensions(f"{ROOT / 'docs/_ext/griffe_docstrings.py'}:DoctestFences")
    buckets = griffe.load("shapewatch.buckets", extensions=ext, docstring_parser="google",
                          search_paths=[str(ROOT)], allow_inspection=False)
    for name in ("propose", "Buckets", "pad_to"):  # examples under an indented 'Example:'
        sections = buckets[name].docstring.parse("google", warn_unknown_params=False,
                                                 warn_missing_types=False)
        text = "\n\n".join(s.value for s in sections if s.kind.value == "text")
        html = markdown.markdown(text, extensions=["pymdownx.superfences"])
        assert ">>>" in text and "```" not in html, f"{name}: {html}"


def test_the_api_reference_names_no_private_module() -> None:
    import inspect

    import shapewatch
    import shapewatch.buckets

    private = re.compile(r"(?:shapewatch(?:\.\w+)*\.|``)_[a-z]\w*")
    shown = {"shapewatch.buckets": shapewatch.buckets.__doc__}  # the page shows its docstring
    for module in (shapewatch, shapewatch.buckets):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or name.startswith("__"):
                continue
            shown[f"{module.__name__}.{name}"] = inspect.getdoc(obj)
            members = vars(obj).items() if inspect.isclass(obj) else ()
            for member, value in members:
                if not member.startswith("_") and (callable(value) or isinstance(
                        value, property | classmethod | staticmethod)):
                    shown[f"{module.__name__}.{name}.{member}"] = inspect.getdoc(value)
    found = {where: sorted(set(private.findall(doc))) for where, doc in shown.items()
             if doc and private.search(doc)}
    assert not found, f"docstrings on the API pages name private modules: {found}"
