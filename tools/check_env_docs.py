#!/usr/bin/env python3
"""Every GRIMOIRE_* environment variable the engine reads is documented in docs/ENVIRONMENT.md, and every one
documented there is still read.

A variable counts as read when its name appears as a string literal in src/ ("GRIMOIRE_X": getenv calls, CLI11
envname, helpers that take the name); documented when a table row of docs/ENVIRONMENT.md starts with `GRIMOIRE_X`.

    tools/check_env_docs.py [REPO_ROOT]
"""

import os
import re
import sys


def read_in_src(root):
    names = set()
    for base, _, files in os.walk(os.path.join(root, "src")):
        for f in files:
            if f.endswith((".cpp", ".cu", ".cuh", ".h")):
                with open(os.path.join(base, f), encoding="utf-8") as fh:
                    names.update(re.findall(r'"(GRIMOIRE_[A-Z0-9_]+)"', fh.read()))
    return names


def documented(root):
    with open(os.path.join(root, "docs", "ENVIRONMENT.md"), encoding="utf-8") as fh:
        return set(re.findall(r"^\| `(GRIMOIRE_[A-Z0-9_]+)` \|", fh.read(), re.MULTILINE))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    used, docs = read_in_src(root), documented(root)
    missing, stale = sorted(used - docs), sorted(docs - used)
    for n in missing:
        print(f"read in src/ but not in docs/ENVIRONMENT.md: {n}")
    for n in stale:
        print(f"in docs/ENVIRONMENT.md but no longer read in src/: {n}")
    if missing or stale:
        return 1
    print(f"{len(used)} environment variables, all documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
