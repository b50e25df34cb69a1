"""Compare two ``sap-precompile <scene> --resources --json`` outputs kernel by kernel: REG and STACK
per (configuration, kernel), before and after a change.

    sap-precompile humanoid --resources --json > before.txt      # on the old tree
    sap-precompile humanoid --resources --json > after.txt       # on the new one
    python scripts/compare_resources.py before.txt after.txt     # a Markdown table; exit 1 if any grew

The JSON object is the last line of each file (the lines before it are the tool's progress). A
kernel is named by its Python name (the generated module's hash suffix dropped), so a kernel that
moved to another module, or whose module hash changed, still pairs with itself. Rows where REG or
STACK grew are marked; kernels only on one side are listed as such.
"""

from __future__ import annotations

import argparse
import json
import re
import sys


def load(path: str) -> dict:
    """``{(configuration, kernel): (REG, STACK)}`` of one sap-precompile JSON output."""
    with open(path, encoding="utf-8") as f:
        last = [line for line in f if line.startswith("{")][-1]
    out = {}
    for v in json.loads(last)["variants"]:
        for kernel, r in v.get("resources", {}).items():
            name = re.sub(r"_[0-9a-f]{8}$", "", kernel)
            for config in v["used_by"]:
                out[(config, name)] = (r["REG"], r["STACK"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--all", action="store_true", help="list every kernel, not only those that changed")
    args = p.parse_args(argv)
    a, b = load(args.before), load(args.after)
    grew = 0
    print("| configuration | kernel | REG before | REG after | STACK before | STACK after | |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(set(a) | set(b)):
        ra, rb = a.get(key), b.get(key)
        if ra == rb and not args.all:
            continue
        mark = ""
        if ra is None or rb is None:
            mark = "only before" if rb is None else "only after"
        elif rb[0] > ra[0] or rb[1] > ra[1]:
            mark, grew = "**grew**", grew + 1
        elif rb != ra:
            mark = "lower"
        f = lambda r, i: "—" if r is None else str(r[i])  # noqa: E731
        print(f"| {key[0]} | {key[1]} | {f(ra, 0)} | {f(rb, 0)} | {f(ra, 1)} | {f(rb, 1)} | {mark} |")
    same = sum(1 for k in set(a) & set(b) if a[k] == b[k])
    print(f"\n{same} (configuration, kernel) pairs unchanged, {grew} grew")
    return int(grew > 0)


if __name__ == "__main__":
    sys.exit(main())
