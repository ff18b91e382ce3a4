#!/usr/bin/env python3
"""Peak heap of a heaptrack profile by the enoki code that allocated it.

Input: `heaptrack_print --flamegraph-cost-type peak -F <file>` stacks (root;...;leaf cost).
Each stack is charged to its leaf-most frame in an enoki source file (reconciler/, crds/),
and the sites are grouped into the caches they fill. Prints Markdown.
"""
import collections
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Our source files by base name (heaptrack names a frame's file by its base name only); the
# in-memory fake API of the unit tests never runs in the controller.
OURS = collections.defaultdict(list)
for path in sorted(
    glob.glob(f"{ROOT}/reconciler/**/*.rs", recursive=True)
    + glob.glob(f"{ROOT}/crds/**/*.rs", recursive=True)
):
    if "/fake_api" not in path:
        OURS[os.path.basename(path)].append(os.path.relpath(path, ROOT))
for generic in ("mod.rs", "lib.rs", "main.rs"):
    OURS.pop(generic, None)
FNS = {}


def defines(path, name):
    """Whether `path` defines a function called `name`."""
    if path not in FNS:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            FNS[path] = set(re.findall(r"\bfn ([A-Za-z_][A-Za-z0-9_]*)", f.read()))
    return re.match(r"[A-Za-z_][A-Za-z0-9_]*", name or "") and re.match(
        r"[A-Za-z_][A-Za-z0-9_]*", name
    ).group(0) in FNS[path]


def ours(base, name):
    """The source file of a frame: of two files with one base name, the one defining it."""
    paths = OURS.get(base, [])
    if len(paths) > 1:
        return next((p for p in paths if defines(p, name)), paths[0])
    return paths[0] if paths else None


# The same file names in dependencies: tokio's runtime context, kube-runtime's reflector store.
FOREIGN = {
    ("context.rs", "set_scheduler"),
    ("context.rs", "{closure#0}<>"),
    ("store.rs", "apply_watcher_event"),
}

GROUPS = [
    ("plan cache (ingested syntheses, `--plan-cache-resources`)", ("reconciler/plan/",)),
    ("Composition and ResourceSlice caches", ("crds/",)),
    ("watch tables (managed objects' metadata, input rows)", ("watches/managed.rs", "watches/table.rs")),
    ("input objects, readers and served inputs", ("run/watches.rs", "run/watches/inputs.rs", "run/inputs.rs")),
    ("per-Composition memory, status and health", ("run/memory.rs", "status_write.rs", "run/health.rs", "run/condition.rs")),
]


def frame(text):
    m = re.match(r"(.*) \(([^)]*)\)$", text)
    name, file = (m.group(1), m.group(2)) if m else (text, "")
    if name.startswith("_R"):
        toks = re.findall(r"(\d+)([A-Za-z_][A-Za-z0-9_]*)", name)
        name = "::".join(r[: int(n)] for n, r in toks if int(n) <= len(r))
    return name, file


def site(frames):
    for name, file in reversed(frames):
        base = file.split("/")[-1]
        if base in OURS and not any(base == f and name.startswith(fn) for f, fn in FOREIGN):
            return ours(base, name), name
    return None, None


def main(path):
    sites = collections.Counter()
    store = collections.Counter()
    groups = collections.Counter()
    total = 0
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        i = line.rfind(" ")
        cost = int(line[i + 1 :])
        if cost <= 0:
            continue
        total += cost
        frames = [frame(f) for f in line[:i].split(";") if f]
        file, name = site(frames)
        leaf_store = any(f.endswith("store.rs") and "apply_watcher_event" in n for n, f in frames)
        if file is None:
            sites[("(dependencies only)", "")] += cost
        else:
            sites[(file, name)] += cost
        if leaf_store and file is not None:
            store[file] += cost
        group = next((g for g, keys in GROUPS if file and any(k in file for k in keys)), "other")
        if group == "other" and leaf_store and file and "/run/start" in file:
            # The Composition watch is started by the controller stack itself.
            group = "Composition and ResourceSlice caches"
        groups[group] += cost
    mib = lambda b: f"{b / 2**20:.1f}"
    print(f"Peak heap: **{mib(total)} MiB**.\n")
    print("| where | MiB |\n| --- | --- |")
    for g, cost in groups.most_common():
        print(f"| {g} | {mib(cost)} |")
    print("\nTop allocation sites (leaf-most enoki frame):\n")
    print("| site | MiB |\n| --- | --- |")
    for (file, name), cost in sites.most_common(20):
        print(f"| `{file}` {name} | {mib(cost)} |")
    if store:
        print("\nReflector stores (kube-runtime `apply_watcher_event`) by the enoki code that started the watch:\n")
        print("| watch | MiB |\n| --- | --- |")
        for file, cost in store.most_common(6):
            print(f"| `{file}` | {mib(cost)} |")


if __name__ == "__main__":
    main(sys.argv[1])
