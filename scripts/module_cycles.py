#!/usr/bin/env python3
"""Import circles among a crate's top-level modules, or among its files.

Reads every `.rs` file under a crate's `src/`, maps it to its top-level module
(`src/api/keys.rs` -> `api`, `src/state.rs` -> `state`), collects the top-level modules each
one names through `crate::...` paths (plain, `use crate::{a, b::c}` groups, and `super::` from
a top-level module's file reaching the crate root), and prints the strongly-connected
components with more than one module, each with the edges that keep it together and, per
edge, the file:line that makes it. Comments (and so doc links) do not count: they compile to
nothing.

    python3 scripts/module_cycles.py CRATE/src [--edges] [--check]
    python3 scripts/module_cycles.py --files CRATE/src [CRATE/src ...] [--edges] [--check]

`--files` checks files instead (see `file_cycles`): a file depends on another when it names a
path that resolves into it (`crate::a::b`, `super::x`, `self::x`, a child module named bare) or
an item that `lib.rs` or a `mod.rs` re-exports from it (`use crate::Thing` where `lib.rs` says
`pub use engine::Thing` is a dependency on `engine.rs`). Every file counts, `lib.rs` included,
and so does test code: a circle through a `#[cfg(test)]` module is still a circle.

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


def print_cycles(cycles, edges, where, title: str, name) -> None:
    """Each cycle, largest first, with the edges that keep it together and the file:line of
    each (`name` prints a node)."""
    indent = " " * (len(title) - len(title.lstrip()) + 2)
    for comp in sorted(cycles, key=len, reverse=True):
        members = set(comp)
        print(f"{title} of {len(comp)}: {' '.join(name(m) for m in comp)}")
        for m in comp:
            for t in sorted(edges[m] & members):
                print(f"{indent}{name(m)} -> {name(t)}  ({where[(m, t)]})")


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



# --- files --------------------------------------------------------------------------------


def blank_noncode(text: str) -> str:
    """The text with comments and the insides of string and char literals replaced by spaces
    (newlines kept), so that offsets and line numbers stay those of the file and nothing in a
    comment, doc link or string counts as a path."""
    out = list(text)
    n = len(text)

    def blank(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    i = 0
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i : i + 300])) and (
            i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1])
        ):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            blank(i + m.end(), j - len(end))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\(x..|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i : i + 12])):
            blank(i + 1, i + len(m.group(0)) - 1)
            i += len(m.group(0))
        else:
            i += 1
    return "".join(out)


def parse_tree(text: str, i: int):
    """Parses a path or use tree starting at `i` (`a::b::{c, d::e as f, g::*}`): returns the
    list of (segments, name bound) it names, and where it ends. A path that stops at an
    identifier followed by something else (`a::b(`, `a::B::new`) is taken as far as it goes:
    resolution stops at the first segment that is not a module."""
    paths = []

    def skip_ws(i):
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def tree(i, prefix):
        i = skip_ws(i)
        if i < len(text) and text[i] == "{":
            i += 1
            while True:
                i = skip_ws(i)
                if i >= len(text) or text[i] == "}":
                    return i + 1
                i = tree(i, prefix)
                i = skip_ws(i)
                if i < len(text) and text[i] == ",":
                    i += 1
        if i < len(text) and text[i] == "*":
            paths.append((prefix, "*"))
            return i + 1
        m = re.compile(r"\$?" + IDENT).match(text, i)
        if not m:
            if prefix:
                paths.append((prefix, prefix[-1]))
            return i
        seg = m.group(0).lstrip("$")
        i = skip_ws(m.end())
        if text.startswith("::", i) and not text.startswith("::<", i):
            return tree(i + 2, prefix + [seg])
        bound = seg
        a = re.compile(r"as\s+(" + IDENT + ")").match(text, i)
        if a:
            bound, i = a.group(1), a.end()
        if seg == "self" and prefix:
            paths.append((prefix, bound if a else prefix[-1]))
        else:
            paths.append((prefix + [seg], bound))
        return i

    end = tree(i, [])
    return paths, end


class Crate:
    def __init__(self, src: Path):
        self.src = src
        self.files = sorted(
            f for f in src.rglob("*.rs") if "bin" not in f.relative_to(src).parts[:-1]
        )
        self.text = {f: blank_noncode(f.read_text()) for f in self.files}
        # Module path -> (file, inline: whether declared as `mod x { }` inside that file).
        self.modules: dict[tuple, tuple[Path, bool]] = {}
        # File -> [(start, end, module path)] of its inline modules, outermost first.
        self.inline: dict[Path, list] = {}
        for f in self.files:
            self.modules[self.file_module(f)] = (f, False)
        for f in self.files:
            self.inline[f] = []
            text = self.text[f]
            for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", text):
                end = matching_brace(text, m.end() - 1)
                outer = self.module_at(f, m.start())
                path = outer + (m.group(1),)
                self.inline[f].append((m.end(), end, path))
                self.modules.setdefault(path, (f, True))
        self._uses: dict[tuple, list] = {}

    def file_module(self, f: Path) -> tuple:
        rel = f.relative_to(self.src)
        parts = list(rel.parts[:-1])
        if rel.name == "mod.rs" or (not parts and rel.stem in ("lib", "main")):
            pass
        else:
            parts.append(rel.stem)
        return tuple(parts)

    def module_at(self, f: Path, pos: int) -> tuple:
        path = self.file_module(f)
        for start, end, inner in self.inline.get(f, []):
            if start <= pos < end and len(inner) > len(path):
                path = inner
        return path

    def line(self, f: Path, pos: int) -> int:
        return self.text[f].count("\n", 0, pos) + 1

    def uses_of(self, module: tuple) -> list:
        """(segments, name bound) of every `use` declared directly in `module`."""
        if module not in self._uses:
            f, _ = self.modules[module]
            found = []
            for pos, paths in self.use_trees(f):
                if self.module_at(f, pos) == module:
                    found.extend(paths)
            self._uses[module] = found
        return self._uses[module]

    def use_trees(self, f: Path):
        text = self.text[f]
        for m in re.finditer(r"\buse\s+(?=[$A-Za-z_{:])", text):
            paths, end = parse_tree(text, m.end())
            yield m.start(), paths

    def defines(self, module: tuple, item: str) -> bool:
        f, _ = self.modules[module]
        text = self.text[f]
        kinds = r"(?:fn|struct|enum|trait|type|const|static|union|mod)"
        for m in re.finditer(r"\b" + kinds + r"\s+" + re.escape(item) + r"\b", text):
            if self.module_at(f, m.start()) == module:
                return True
        return bool(re.search(r"macro_rules!\s*" + re.escape(item) + r"\b", text))

    def resolve(self, here: tuple, segs: list, depth: int = 0) -> Path | None:
        """The file that `segs`, written in module `here`, names; None when it leaves the
        crate (std, another crate, a local name)."""
        if depth > 16 or not segs:
            return None
        segs = list(segs)
        head = segs[0]
        if head == "crate":
            cur, segs = (), segs[1:]
        elif head in ("super", "self"):
            cur = here
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    cur = cur[:-1]
        elif here + (head,) in self.modules:
            cur = here
        else:
            return None
        while segs and cur + (segs[0],) in self.modules:
            cur = cur + (segs.pop(0),)
        # The item's module is `cur`; an item it does not define but imports (a `use` there,
        # such as `lib.rs`'s `pub use engine::Engine`) lives where that `use` points.
        if segs and not self.defines(cur, segs[0]):
            item = segs[0]
            for path, bound in self.uses_of(cur):
                if bound == item:
                    target = self.resolve(cur, path, depth + 1)
                    if target is not None:
                        return target
            for path, bound in self.uses_of(cur):
                if bound == "*":
                    target_mod = self.module_of_path(cur, path)
                    if target_mod is not None and self.defines(target_mod, item):
                        return self.modules[target_mod][0]
        return self.modules[cur][0]

    def module_of_path(self, here: tuple, segs: list):
        f = self.resolve(here, segs + ["\0"])
        if f is None:
            return None
        # The module the glob names is the deepest one the path reaches.
        cur = () if segs[0] == "crate" else here
        for s in segs:
            if s == "crate":
                continue
            cur = cur[:-1] if s == "super" else cur if s == "self" else cur + (s,)
        return cur if cur in self.modules else None

    def references(self, f: Path):
        """(file named, line) for every path in `f` that resolves to a file of the crate."""
        text = self.text[f]
        covered = []
        for pos, paths in self.use_trees(f):
            here = self.module_at(f, pos)
            for segs, _ in paths:
                target = self.resolve(here, segs)
                if target is not None:
                    yield target, self.line(f, pos)
            end = text.find(";", pos)
            covered.append((pos, len(text) if end < 0 else end))
        start = re.compile(r"(?<![A-Za-z0-9_:$.])\$?" + IDENT + r"\s*::")
        for m in start.finditer(text):
            if any(a <= m.start() < b for a, b in covered):
                continue
            here = self.module_at(f, m.start())
            paths, _ = parse_tree(text, m.start())
            for segs, _ in paths:
                target = self.resolve(here, segs)
                if target is not None:
                    yield target, self.line(f, m.start())


def matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text)


def file_cycles(src: Path, show_edges: bool) -> int:
    """Prints the circles among `src`'s files; returns how many."""
    crate = Crate(src)
    edges: dict[Path, set[Path]] = defaultdict(set)
    where: dict[tuple, str] = {}
    for f in crate.files:
        for there, line in crate.references(f):
            if there != f:
                edges[f].add(there)
                where.setdefault((f, there), f"{f.relative_to(src)}:{line}")
    name = lambda f: str(f.relative_to(src))
    if show_edges:
        for f in crate.files:
            print(f"{name(f)} -> {', '.join(sorted(name(t) for t in edges[f])) or '(nothing)'}")
        print()
    cycles = [c for c in tarjan(crate.files, edges) if len(c) > 1]
    count = sum(len(e) for e in edges.values())
    print(f"{src}: {len(crate.files)} files, {count} edges, {len(cycles)} circles")
    print_cycles(cycles, edges, where, "  circle", name)
    return len(cycles)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--files" in sys.argv:
        circles = sum(file_cycles(Path(a), "--edges" in sys.argv) for a in args)
        return 1 if "--check" in sys.argv and circles else 0
    src = Path(args[0] if args else "gateway/service/src")
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
    print_cycles(cycles, edges, where, "\ncycle", str)
    return 1 if "--check" in sys.argv else 0


if __name__ == "__main__":
    sys.exit(main())
