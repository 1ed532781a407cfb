#!/usr/bin/env python3
"""Instruction mix of a CUDA kernel's loops, read from the SASS of a built object (no GPU needed).

A device call is scarce (30 minutes a session, and some sessions get none), so a change to a kernel's inner
loop can be judged here first by what it issues: this prints, for each kernel whose mangled name contains one
of the given substrings, every loop (a backward branch) that holds a tensor-core instruction (HMMA / HGMMA /
QMMA), with its instruction count and its opcodes by count; --per N also divides the count by N (the loop's
work units, e.g. chunk-tiles an iteration takes). --all prints every loop.

cuobjdump and nvdisasm come from the CUDA toolkit; where it has none (this project's CPU machine), from
the pinned PyPI wheels of tools/sass-requirements.txt:
    python3 -m pip install --no-deps --target build/sass-tools -r tools/sass-requirements.txt
which this script finds under build/sass-tools (or set CUOBJDUMP to the cuobjdump binary).

    tools/sass_loops.py OBJECT NAME_SUBSTRING [NAME_SUBSTRING ...] [--per N] [--all] [--json OUT]
"""

import argparse
import collections
import json
import os
import re
import shutil
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TENSOR_OPS = ("HMMA", "HGMMA", "QMMA", "IMMA")


def find_cuobjdump():
    """The cuobjdump binary, and the directory of an nvdisasm beside it (cuobjdump -sass runs nvdisasm)."""
    cands = [os.environ.get("CUOBJDUMP", ""), shutil.which("cuobjdump") or "", "/usr/local/cuda/bin/cuobjdump"]
    cands += [os.path.join(ROOT, "build/sass-tools/nvidia", d, "bin/cuobjdump") for d in ("cu13", "cu12")]
    for c in cands:
        if c and os.path.isfile(c):
            d = os.path.dirname(c)
            for tool in ("cuobjdump", "nvdisasm"):  # wheels unpacked by pip --target keep no exec bit
                p = os.path.join(d, tool)
                if os.path.isfile(p) and not os.access(p, os.X_OK):
                    os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            return c, d
    sys.exit("sass_loops: no cuobjdump (install tools/sass-requirements.txt into build/sass-tools, or set CUOBJDUMP)")


def functions(sass_text):
    """(mangled name, [(address, opcode, text)]) for each function of cuobjdump -sass output."""
    for block in sass_text.split("Function : ")[1:]:
        name = block.split("\n", 1)[0].strip()
        ins = []
        for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", block):
            text = re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())  # drop the predicate guard
            op = text.split()[0] if text else ""
            ins.append((int(m.group(1), 16), op, text))
        yield name, ins


def loops(ins, everything):
    """Each loop (a branch to an address at or before it): its range, instruction count and opcode counts."""
    out = []
    for addr, op, text in ins:
        if not op.startswith("BRA"):
            continue
        m = re.search(r"0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) > addr:
            continue
        lo = int(m.group(1), 16)
        ops = collections.Counter(o.split(".")[0] for a, o, _ in ins if lo <= a <= addr)
        if everything or any(ops[t] for t in TENSOR_OPS):
            out.append({"from": hex(lo), "to": hex(addr), "instructions": sum(ops.values()), "ops": dict(ops.most_common())})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("object")
    ap.add_argument("names", nargs="+", help="substrings of the mangled kernel names")
    ap.add_argument("--per", type=float, default=0, help="also print instructions / PER for each loop")
    ap.add_argument("--all", action="store_true", help="every loop, not only those with tensor-core ops")
    ap.add_argument("--json", help="write the loops found to this file")
    a = ap.parse_args()
    exe, tooldir = find_cuobjdump()
    env = dict(os.environ, PATH=tooldir + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([exe, "-sass", a.object], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("sass_loops: cuobjdump failed: " + r.stderr.strip())
    found = {}
    for name, ins in functions(r.stdout):
        if not any(s in name for s in a.names):
            continue
        ls = loops(ins, a.all)
        found[name] = {"instructions": len(ins), "loops": ls}
        print(f"{name}: {len(ins)} instructions")
        for lp in ls:
            per = f" ({lp['instructions'] / a.per:.1f} per unit)" if a.per else ""
            top = ", ".join(f"{k} {v}" for k, v in list(lp["ops"].items())[:14])
            print(f"  loop {lp['from']}-{lp['to']}: {lp['instructions']} instructions{per}; {top}")
    if not found:
        sys.exit("sass_loops: no kernel name contains " + " or ".join(a.names))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
