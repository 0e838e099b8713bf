"""The runnable blocks of README.md and docs/*.md, by explicit rules (what tests/docs/test_docs_run.py runs).

Rules (also in docs/layout.md's "Docs that run"):

* A fenced block whose info string starts with ``bash``, ``sh``, ``shell``, ``console`` or ``python`` is run;
  any other fence (none, ``text``, ``yaml``, output listings) is prose and is not.
* HTML comments ``<!-- docs-test: ... -->`` directly above a block (only blank lines or other such
  comments between) configure it; one that is followed by anything else fails the test (it would configure
  nothing). Directives:

  - ``skip (reason)``: the block is not run; the reason, in parentheses, is required. Only for a block that
    needs a file the reader brings (their own checkpoints) or a fragment that is not a whole program.
  - ``check (reason)``: the block is not run (it takes an hour, several processes or GPUs) but checked against
    the code (runner.check_page): every ``unlearnkit`` command (also under ``torchrun ... -m unlearnkit``) is
    parsed by the CLI (the command and each option exist, each value has its option's type), ``make TARGET``
    names a rule of the Makefile, ``pip install ".[extra]"`` extras exist in pyproject.toml, ``pytest PATH``
    paths and ``python SCRIPT.py`` scripts exist; a Python block compiles. Any other command fails the check.
  - ``tiny ITEM ...`` (items split like a shell line): ``--option=VALUE`` or ``--flag`` is set on every
    ``unlearnkit`` command of the block that has that option (replacing the value the page gives);
    ``OLD=>NEW`` replaces text in the block before anything else (shell and Python blocks alike).
  - ``namespace NAME``: a Python block starts with the names of fixture NAME (``test_docs_run.NAMESPACES``)
    instead of an empty namespace.

* Shell blocks: ``\\`` continues a line, ``#`` starts a comment; in a ``console`` block only lines starting
  with ``$ `` are commands. Every command must be ``unlearnkit ...`` or ``python -m unlearnkit ...`` (run
  in-process), or a here-document that writes a file the next commands read (``cat > FILE <<'END'``, its lines,
  then ``END``: FILE is written in the page's folder, relative, never outside it); a block with any other
  command must carry ``skip``.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

SHELL = {"bash", "sh", "shell", "console"}
RUN = SHELL | {"python"}
FENCE = re.compile(r"^\s*(```|~~~)\s*([^\s`]*)")
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip\s+\((.+)\)$")
CHECK = re.compile(r"^check\s+\((.+)\)$")
HEREDOC = re.compile(r"""^cat\s*>\s*(?P<path>[\w./-]+)\s*<<-?\s*(?P<q>['"]?)(?P<tag>\w+)(?P=q)\s*$""")


class DocsTestError(ValueError):
    """A page breaks the rules (a dangling or unknown directive, a skip without a reason, an unclosed fence)."""


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None = None
    check: str | None = None  # checked against the code, not run (the reason)
    options: list[str] = field(default_factory=list)  # --option=VALUE / --flag
    replace: list[tuple[str, str]] = field(default_factory=list)
    namespace: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def source(self) -> str:
        """The block's text with every ``OLD=>NEW`` replacement applied."""
        text = self.text
        for old, new in self.replace:
            if old not in text:
                raise DocsTestError(f"{self.where}: tiny {old}=>{new}: {old!r} is not in the block (stale directive)")
            text = text.replace(old, new)
        return text

    def commands(self) -> list[list[str]]:
        """Each shell command of the block as its words (comments and continuations resolved); a here-document
        is ``["cat", ">", FILE, TEXT]`` (:meth:`steps` says so)."""
        lines, joined = self.source().splitlines(), []
        if self.lang == "console":
            lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
        out: list[list[str]] = []
        buf = ""
        it = iter(lines)
        for ln in it:
            m = HEREDOC.match(ln) if not buf else None
            if m:
                body = []
                for inner in it:
                    if inner.strip() == m.group("tag"):
                        break
                    body.append(inner)
                else:
                    raise DocsTestError(f"{self.where}: the here-document {m.group('tag')} is never closed")
                path = m.group("path")
                if path.startswith("/") or ".." in path.split("/"):
                    raise DocsTestError(f"{self.where}: a here-document writes inside the page's folder, not {path}")
                out += self._words(joined)
                joined = []
                out.append(["cat", ">", path, "\n".join(body) + "\n"])
                continue
            if ln.rstrip().endswith("\\"):
                buf += ln.rstrip()[:-1] + " "
                continue
            joined.append(buf + ln)
            buf = ""
        if buf:
            joined.append(buf)
        return out + self._words(joined)

    @staticmethod
    def _words(lines: list[str]) -> list[list[str]]:
        return [words for words in (shlex.split(ln, comments=True) for ln in lines) if words]


def _configure(block: Block, directives: list[tuple[int, str]], page: str) -> None:
    for line, text in directives:
        kind, _, rest = text.partition(" ")
        if kind in ("skip", "check"):
            m = SKIP.match(text) if kind == "skip" else CHECK.match(text)
            if not m:
                raise DocsTestError(f"{page}:{line}: write `docs-test: {kind} (reason)`, with the reason")
            setattr(block, kind, m.group(1))
        elif kind == "tiny":
            for item in shlex.split(rest):
                if "=>" in item:
                    old, new = item.split("=>", 1)
                    block.replace.append((old, new))
                elif item.startswith("--"):
                    block.options.append(item)
                else:
                    raise DocsTestError(f"{page}:{line}: tiny item {item!r} is neither --option=VALUE nor OLD=>NEW")
        elif kind == "namespace":
            block.namespace = rest.strip()
        else:
            raise DocsTestError(f"{page}:{line}: unknown docs-test directive {kind!r} (skip, check, tiny or "
                                f"namespace)")


def blocks(text: str, page: str) -> list[Block]:
    """Every runnable block of a Markdown page (``page`` names it in messages), in order, configured by
    its directives (module docstring); a :class:`DocsTestError` for a page that breaks the rules."""
    out: list[Block] = []
    pending: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        d = DIRECTIVE.match(ln)
        f = FENCE.match(ln)
        if d:
            pending.append((i + 1, d.group(1)))
        elif f:
            marker, lang = f.group(1), f.group(2).lower()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(marker)), None)
            if end is None:
                raise DocsTestError(f"{page}:{i + 1}: the fence is never closed")
            indent = len(ln) - len(ln.lstrip())
            # a fence indented by ``indent`` (in a list item): its lines lose that much (a fence at the margin: none)
            body = "\n".join(x[indent:] if indent == 0 or x[:indent].isspace() else x.lstrip()
                              for x in lines[i + 1:end])
            if lang in RUN:
                block = Block(page, i + 1, lang, body + "\n")
                _configure(block, pending, page)
                out.append(block)
            elif pending:
                raise DocsTestError(f"{page}:{pending[0][0]}: a docs-test directive above a block that is not run "
                                    f"(```{lang})")
            pending = []
            i = end
        elif ln.strip() and pending:
            raise DocsTestError(f"{page}:{pending[0][0]}: a docs-test directive not directly above a fenced block")
        i += 1
    if pending:
        raise DocsTestError(f"{page}:{pending[0][0]}: a docs-test directive after the last block")
    return out
