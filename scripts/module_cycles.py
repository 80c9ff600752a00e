#!/usr/bin/env python3
"""Import circles among a crate's top-level modules.

Reads every `.rs` file under a crate's `src/`, maps it to its top-level module
(`src/api/keys.rs` -> `api`, `src/state.rs` -> `state`), collects the top-level modules each
one names through `crate::...` paths (plain, `use crate::{a, b::c}` groups, and `super::` from
a top-level module's file reaching the crate root), and prints the strongly-connected
components with more than one module, each with the edges that keep it together and, per
edge, the file:line that makes it. Comments (and so doc links) do not count: they compile to
nothing.

    python3 scripts/module_cycles.py [gateway/src] [--edges] [--check]

`--edges` prints the whole module graph as well; `--check` exits 1 when a cycle is left, or
when a module uses one listed above it in `lib.rs`'s table of contents (which lists the
modules top to bottom), for CI. `lib.rs` and `main.rs` are the crate root, not a module, and
are skipped.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments(text: str) -> str:
    """Removes `//` line comments and `/* */` block comments, keeping line numbers and
    string literals (a `//` inside a string is not a comment)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i : i + 4]):
            # A char literal such as '"', not a lifetime.
            m = re.match(r"'(\\.|[^\\'])'", text[i : i + 4])
            out.append(m.group(0))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def group_heads(text: str, start: int) -> list[str]:
    """The first path segment of each item of a `{...}` group opening at `start`."""
    depth, item, heads, i = 0, "", [], start
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == "}":
            depth -= 1
            if depth == 0:
                heads.append(item)
                break
        if depth == 1 and c == ",":
            heads.append(item)
            item = ""
        elif depth >= 1:
            item += c
        i += 1
    names = []
    for h in heads:
        m = re.match(r"\s*(" + IDENT + ")", h)
        if m:
            names.append(m.group(1))
    return names


def module_of(path: Path, src: Path) -> str | None:
    rel = path.relative_to(src)
    if len(rel.parts) == 1:
        stem = rel.stem
        return None if stem in ("lib", "main") else stem
    return rel.parts[0]


def references(path: Path, src: Path, modules: set[str]):
    """(module named, line) for every crate path in one file."""
    text = strip_comments(path.read_text())
    rel = path.relative_to(src)
    # How many `super::` reach the crate root from this file.
    depth = len(rel.parts) - 1
    if rel.name == "mod.rs":
        depth -= 1
    roots = [r"\bcrate::"]
    if depth >= 0:
        roots.append(r"\b(?:self::)?" + r"super::" * (depth + 1))
    for root in roots:
        for m in re.finditer(root, text):
            line = text.count("\n", 0, m.start()) + 1
            rest = text[m.end() :]
            if rest.startswith("{"):
                names = group_heads(text, m.end())
            else:
                head = re.match(IDENT, rest)
                names = [head.group(0)] if head else []
            for name in names:
                if name in modules:
                    yield name, line


def tarjan(nodes, edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def table_order(src: Path) -> list[str]:
    """The modules in the order `lib.rs`'s doc comment first links them (`[`name`]`)."""
    lib = src / "lib.rs"
    if not lib.exists():
        return []
    order = []
    for line in lib.read_text().splitlines():
        if not line.startswith("//!"):
            continue
        for name in re.findall(r"\[`(" + IDENT + r")`\]", line):
            if name not in order:
                order.append(name)
    return order


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = Path(args[0] if args else "gateway/src")
    files = sorted(src.rglob("*.rs"))
    modules = {m for f in files if (m := module_of(f, src))}
    edges: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], str] = {}
    for f in files:
        here = module_of(f, src)
        if here is None:
            continue
        for there, line in references(f, src, modules):
            if there != here:
                edges[here].add(there)
                where.setdefault((here, there), f"{f.relative_to(src)}:{line}")
    if "--edges" in sys.argv:
        for m in sorted(modules):
            print(f"{m} -> {', '.join(sorted(edges[m])) or '(nothing)'}")
        print()
    cycles = [c for c in tarjan(modules, edges) if len(c) > 1]
    print(f"{len(modules)} top-level modules, {sum(len(e) for e in edges.values())} edges")
    order = table_order(src)
    upward = []
    if order:
        rank = {m: i for i, m in enumerate(order)}
        unlisted = sorted(modules - set(rank))
        if unlisted:
            print(f"not in lib.rs's table of contents: {' '.join(unlisted)}")
        for m in sorted(modules & set(rank)):
            for t in sorted(edges[m] & set(rank)):
                if rank[t] < rank[m]:
                    upward.append(f"  {m} -> {t}  ({where[(m, t)]})")
        if upward:
            print("uses of a module listed above the user in lib.rs:")
            print("\n".join(upward))
        else:
            print("every module uses only modules listed below it in lib.rs")
    if not cycles:
        print("no import cycles")
        return 1 if "--check" in sys.argv and upward else 0
    for comp in sorted(cycles, key=len, reverse=True):
        members = set(comp)
        print(f"\ncycle of {len(comp)}: {' '.join(comp)}")
        for m in comp:
            for t in sorted(edges[m] & members):
                print(f"  {m} -> {t}  ({where[(m, t)]})")
    return 1 if "--check" in sys.argv else 0


if __name__ == "__main__":
    sys.exit(main())
