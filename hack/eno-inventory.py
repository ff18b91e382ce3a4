#!/usr/bin/env python3
"""eno-inventory.py — count the SAME / DIFFERENT / MISSING rows of docs/from-eno.md.

Prints the inventory line; `--check` fails when the line in the document differs from the
count (run by hack/test.sh, so the header never drifts from the rows).
"""
import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "from-eno.md"
WORDS = ("SAME", "DIFFERENT", "MISSING")


def count(text):
    n = dict.fromkeys(WORDS, 0)
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4:
            continue
        for w in WORDS:
            if cells[2].startswith(w):
                n[w] += 1
                break
    return n


def line(n):
    return "**Inventory: {} SAME / {} DIFFERENT / {} MISSING**".format(*(n[w] for w in WORDS))


def main():
    text = DOC.read_text()
    want = line(count(text))
    if sys.argv[1:] == ["--check"]:
        found = re.search(r"\*\*Inventory: .*?\*\*", text)
        if not found or found.group(0) != want:
            have = found.group(0) if found else "no inventory line"
            sys.exit(f"eno-inventory: docs/from-eno.md says {have}; the rows say {want}")
        print(f"eno-inventory: {want}", file=sys.stderr)
    else:
        print(want)


main()
