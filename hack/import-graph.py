#!/usr/bin/env python3
"""import-graph.py — the controller's module import graph, and whether it has a cycle.

Reads every `.rs` file under reconciler/controller/src (test modules left out), resolves each
`crate::…` and `super::…` path (and each name a glob import, `use super::*;`, reaches) to the
module file that defines it — an item of another crate is no edge —, and reports the strongly
connected components with more than one module. Exits 1 when there is one (a cycle), listing
its modules and the edges inside it.

The same at folder level: at every depth, modules are grouped by the folder they live in
(`run::composition::synthesize::store` is in `run::composition::synthesize` at depth 3, in
`run::composition` at depth 2), and folders must not call each other in a loop either. A
folder's own module (`run/composition/mod.rs`) using its children is not counted (it is their
parent); a child using its parent's items is. `--dot` prints the module graph. Run by
`make test`.
"""
import os
import re
import sys

# The pure layer lives in its own crate (reconciler/core), which Cargo keeps free of the
# controller: no controller module is listed here any more.
PURE = set()
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reconciler", "controller", "src")
PATH = re.compile(r"\b(crate|super)((?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
GROUP = re.compile(r"\b(crate|super)((?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))*)::\{([^;]*?)\}", re.S)


TEST_MOD = re.compile(r"^#\[cfg\(test\)\]\s*\n\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", re.M)


def modules():
    """Module path (tuple) → file, for every file in the crate (files of `#[cfg(test)] mod x;`
    and of their child modules left out)."""
    found = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, ROOT)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                mod = ()
            elif rel[-1] == "mod":
                mod = tuple(rel[:-1])
            else:
                mod = tuple(rel)
            found[mod] = full
    tests = set()
    for mod, full in found.items():
        for child in TEST_MOD.findall(open(full, encoding="utf-8").read()):
            tests.add(mod + (child,))
    return {
        mod: full
        for mod, full in found.items()
        if not any(mod[: len(t)] == t for t in tests)
    }


RAW = re.compile(r'[bc]?r(#*)"')
CHAR = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'")


def code_only(text):
    """`text` without comments and with the contents of string and character literals
    blanked (their quotes kept): what is left is code, for names and braces alike."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        prev = text[i - 1] if i else " "
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                depth += text.startswith("/*", i) - text.startswith("*/", i)
                i += 2 if text.startswith(("/*", "*/"), i) else 1
        elif (m := RAW.match(text, i)) and not (prev.isalnum() or prev == "_"):
            close = '"' + m.group(1)
            end = text.find(close, m.end())
            end = n if end < 0 else end
            out.append(m.group(0) + re.sub(r"[^\n]", " ", text[m.end() : end]) + close)
            i = end + len(close)
        elif c == '"' or (c in "bc" and text.startswith(c + '"', i) and not (prev.isalnum() or prev == "_")):
            k = 1 if c == '"' else 2  # `"`, or a byte or C string's `b"` / `c"`
            j = i + k
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : i + k] + re.sub(r"[^\n]", " ", text[i + k : j]) + '"')
            i = j + 1
        elif c == "'" and (m := CHAR.match(text, i)):
            out.append("' '")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def closing_brace(text, start):
    """The index just past the `}` that closes the `{` at `start` (in code_only text)."""
    depth = 0
    for j in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    return len(text)


def source(path):
    """The file's code (comments and literal contents left out) without its `#[cfg(test)]`
    modules."""
    text = code_only(open(path, encoding="utf-8").read())
    # `pub(in crate::a::b)` names where an item is visible, not a use of `b`.
    text = re.sub(r"pub\(in [^)]*\)", "pub(crate)", text)
    # Each test module cut out up to its closing brace, so code after one still counts.
    while cut := re.search(r"^#\[cfg\(test\)\]\s*\n\s*mod\s+\w+\s*\{", text, re.M):
        text = text[: cut.start()] + text[closing_brace(text, cut.end() - 1) :]
    return text


REEXPORT = re.compile(r"^\s*pub(?:\([a-z]+\))?\s+use\s+([^;]+);", re.M)
# Any `use`: a child that names an item through its parent's import reaches the item's module.
ALIAS = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?use\s+((?:crate|super|self)[^;]*|[a-z_]+::[^;]*);", re.M)


def reexports(mods):
    """(module, name) → the path it re-exports (`pub use inner::Name;`), and each file's text
    without those lines: a re-export is not a use of the item by the module's own code."""
    table, texts = {}, {}
    for mod, path in mods.items():
        text = source(path)
        for stmt in ALIAS.findall(text):
            stmt = " ".join(stmt.split())
            m = re.match(r"^(.*)::\{(.*)\}$", stmt)
            items = [(m.group(1), i.strip()) for i in m.group(2).split(",")] if m else [stmt.rsplit("::", 1)]
            for prefix, item in items:
                if not item:
                    continue
                alias = item.split(" as ")[-1].strip()
                if alias == "*":
                    alias = "*" + prefix  # one entry per glob: a module may have several
                item = item.split(" as ")[0].strip()
                table[(mod, alias)] = prefix + "::" + item
        texts[mod] = REEXPORT.sub("", text)
    return table, texts


def defines(path, name):
    """Whether the file at `path` defines an item called `name`."""
    item = r"^\s*pub(?:\([a-z]+\))?\s+(?:async\s+)?(?:struct|enum|fn|type|const|static|trait|mod|use[^;]*\b)\s*"
    return re.search(item + re.escape(name) + r"\b", source(path), re.M) is not None


def resolve(mods, here, head, rest, table=None, depth=0):
    """The module a path refers to: the longest prefix that names a module file, following
    re-exports to the module that defines the item."""
    parts = [p for p in rest.split("::") if p]
    if head == "self":
        base = list(here)
    else:
        base = list(() if head == "crate" else here[:-1] if here else ())
    if head == "super" and not here:
        return None
    while parts and parts[0] == "super":
        base = base[:-1]
        parts.pop(0)
    path = base + parts
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            found = tuple(path[:n])
            if table and n < len(path) and (found, path[n]) not in table and depth < 8:
                for key, target in table.items():
                    if key[0] == found and key[1].startswith("*"):
                        inner = resolve(mods, found, "self", "::" + target[: -len("::*")])
                        if inner is not None and defines(mods[inner], path[n]):
                            return inner
            if table and n < len(path) and (found, path[n]) in table and depth < 8:
                target = table[(found, path[n])] + "".join("::" + p for p in path[n + 1 :])
                head2, _, rest2 = target.partition("::")
                if head2 not in ("crate", "super", "self"):
                    # An item of another crate (`use futures::StreamExt;`) is no module here;
                    # a child module or a name `found` imports (`use a::m; use m::X;`) is.
                    if found + (head2,) not in mods and (found, head2) not in table:
                        return None
                    rest2 = target
                    head2 = "self"
                inner = resolve(mods, found, head2, "::" + rest2 if rest2 else "", table, depth + 1)
                if inner is not None:
                    return inner
            return found
    return None


def graph(mods):
    edges = {m: set() for m in mods}
    table, texts = reexports(mods)
    for mod in mods:
        text = texts[mod]
        # A group (`use crate::a::{X, Y};`) refers to where X and Y are, not to `a` itself
        # (unless it names `self`).
        refs = [(h, r) for h, r in PATH.findall(GROUP.sub("", text))]
        for h, prefix, inner in GROUP.findall(text):
            for item in re.split(r"[,\s]+", inner):
                item = item.split("::")[0].strip("{} ")
                if item == "self":
                    refs.append((h, prefix))
                elif item:
                    refs.append((h, prefix + "::" + item))
        # Paths relative to this module: `self::child::…` and `child::…`.
        children = {m[len(mod)] for m in mods if len(m) == len(mod) + 1 and m[: len(mod)] == mod}
        for child in children:
            for r in re.findall(r"(?<![:\w])(?:self::)?" + child + r"((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
                refs.append(("self", "::" + child + r))
        if GLOBS:
            refs += glob_refs(mods, mod, text, table)
        for h, r in refs:
            target = resolve(mods, mod, h, r, table)
            # A module refers to its parent only for what the parent re-exports or declares;
            # the parent's `mod` declarations are not a dependency of the child.
            if target is not None and target != mod and target != ():
                edges[mod].add(target)
    return edges


# Globs are followed (`use <module>::*;`: the names a module reaches through a glob import
# count as uses of the module that defines them); `--no-globs` leaves them out.
GLOBS = "--no-globs" not in sys.argv
GLOB = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?use\s+((?:crate|super|self|[a-z_]\w*)(?:::\w+)*)::\*\s*;", re.M)


# Items a module defines at its top level (private ones too: its children see them).
ITEM = re.compile(r"^(?:pub(?:\([^)]*\))?\s+)?(?:(?:async|unsafe|const)\s+)*(?:struct|enum|fn|type|const|static|trait|macro_rules!)\s+(\w+)", re.M)
_TEXTS = {}


def source_text(path):
    if path not in _TEXTS:
        _TEXTS[path] = source(path)
    return _TEXTS[path]


def names(item, text):
    """Whether `text` names `item`: a type or constant by its word, a function by a call or
    as an argument (`f(`, `(f,`, `, f)`), not a local variable of the same name."""
    word = r"(?<![:\w.])" + re.escape(item) + r"\b"
    if not item[0].islower():
        return re.search(word, text) is not None
    return re.search(word + r"(?:\s*\(|::<)|[(,]\s*" + word + r"\s*[,)]", text) is not None


def globs_of(mods, mod, public_only):
    """The modules `mod`'s glob imports name (`pub use x::*;` only, when `public_only`)."""
    out = []
    for stmt in re.finditer(GLOB, source_text(mods[mod])):
        if public_only and not stmt.group(0).lstrip().startswith("pub"):
            continue
        path = stmt.group(1)
        head, _, rest = path.partition("::")
        if head not in ("crate", "super", "self"):
            if mod + (head,) not in mods:
                continue  # another crate's glob (`use std::fmt::*;`)
            head, rest = "self", path
        source = resolve(mods, mod, head, "::" + rest if rest else "")
        if source is not None and source != mod:
            out.append(source)
    return out


PUBLIC_ITEM = re.compile(r"^pub(?:\([^)]*\))?\s+(?:(?:async|unsafe|const)\s+)*(?:struct|enum|fn|type|const|static|trait)\s+(\w+)", re.M)


def glob_refs(mods, mod, text, table):
    """What a module reaches through `use <module>::*;` (and the globs that module passes on):
    the module itself, and each of its children and imports the module's text names. A parent
    reaches only what a child makes visible (`pub…` items and `pub use`); a child reaches its
    parent's private items and imports too."""
    refs = []
    seen = set()
    # The globs of the whole file (`pub use child::*;` too); the names in its own code.
    work = [(s, False) for s in globs_of(mods, mod, False)]
    while work:
        source, _ = work.pop()
        if source in seen:
            continue
        seen.add(source)
        downward = len(source) > len(mod) and source[: len(mod)] == mod
        own = set((PUBLIC_ITEM if downward else ITEM).findall(source_text(mods[source])))
        if any(names(n, text) for n in own):
            refs.append(("crate", "".join("::" + p for p in source)))
        # A child module is named as a path (`child::…`), an imported item by its name.
        children = {m[len(source)] for m in mods if len(m) == len(source) + 1 and m[: len(source)] == source}
        public = set()
        for stmt in REEXPORT.findall(source_text(mods[source])):
            public |= {i.split(" as ")[-1].strip(" {}") for i in re.split(r"[,\s]*(?:::)?\{|,", stmt)}
            public.add(stmt.rsplit("::", 1)[-1].split(" as ")[-1].strip(" {}"))
        aliases = {alias for (m, alias) in table if m == source and not alias.startswith("*")
                   and alias != "self" and (not downward or alias in public)}
        for name in (set() if downward else children) | aliases:
            tail = r"::" if name in children and name not in aliases else r"\b"
            if re.search(r"(?<![:\w.])" + re.escape(name) + tail, text):
                refs.append(("crate", "".join("::" + p for p in source + (name,))))
        # What that module's own globs bring (only its `pub use x::*` for a parent).
        work += [(s, False) for s in globs_of(mods, source, downward)]
    return refs


def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def folder_cycles(edges):
    """(depth, folders, edges inside) of every loop between folders, at every depth."""
    found = []
    for depth in range(1, max(len(m) for m in edges) + 1):
        folders = {}
        for a, targets in edges.items():
            fa = a[:depth]
            folders.setdefault(fa, set())
            for b in targets:
                fb = b[:depth]
                if fa != fb and fb[: len(fa)] != fa:
                    folders[fa].add(fb)
                folders.setdefault(fb, set())
        for c in sccs(folders):
            if len(c) > 1:
                inside = set(c)
                found.append((depth, sorted(c), [(a, b) for a in sorted(c) for b in sorted(folders[a] & inside)]))
    return found


def name(m):
    return "::".join(m) or "crate"


def main():
    mods = modules()
    edges = graph(mods)
    if "--dot" in sys.argv:
        print("digraph controller {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{name(a)}" -> "{name(b)}";')
        print("}")
        return 0
    cycles = [sorted(c) for c in sccs(edges) if len(c) > 1]
    folders = folder_cycles(edges)
    for depth, c, inside in folders:
        print(f"import-graph: folders calling each other in a loop (depth {depth}): "
              + ", ".join(name(f) for f in c), file=sys.stderr)
        for a, b in inside:
            print(f"  {name(a)} -> {name(b)}", file=sys.stderr)
    impure = [(a, b) for a in sorted(PURE) for b in sorted(edges.get(a, ())) if b not in PURE]
    missing = [m for m in sorted(PURE) if m not in mods]
    for m in missing:
        print(f"import-graph: pure module {name(m)} does not exist", file=sys.stderr)
    for a, b in impure:
        print(f"import-graph: pure module {name(a)} imports {name(b)}", file=sys.stderr)
    if not cycles and not impure and not missing and not folders:
        print(f"import-graph: {len(mods)} controller modules, no import cycle between modules "
              "or folders", file=sys.stderr)
        return 0
    for c in cycles:
        inside = set(c)
        print(f"import-graph: a cycle of {len(c)} modules:", file=sys.stderr)
        for a in c:
            for b in sorted(edges[a] & inside):
                print(f"  {name(a)} -> {name(b)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
