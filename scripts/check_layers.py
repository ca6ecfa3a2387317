#!/usr/bin/env python3
"""Checks the include rules of docs/architecture.md: each folder includes only the layers it may.

    python3 scripts/check_layers.py            # from the repository root; exit 1 on a violation

Run by CTest as `layering` (tests/CMakeLists.txt). Only quoted includes ("...") are project
includes; system and third-party headers use angle brackets or name their own folders (hwy/).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# folder -> the first path components its quoted includes may start with ("." = its own folder,
# by a name without a slash).
PUBLIC = {"linattn"}
LIBRARY_BELOW = {
    "src/core": PUBLIC | {"core"},
    "src/io": PUBLIC | {"core", "io"},
    "src/kernels": PUBLIC | {"core", "kernels", "hwy"},
    "src/feature_maps": PUBLIC | {"core", "kernels", "feature_maps", "hwy"},
    "src/ops/softmax": PUBLIC | {"core", "kernels", "feature_maps", "io", "ops/softmax"},
    "src/ops/linear": PUBLIC | {"core", "kernels", "feature_maps", "io", "ops/linear"},
    "src/ops/linformer": PUBLIC | {"core", "kernels", "feature_maps", "io", "ops/linformer"},
    # The machinery every recurrence family shares (packed sequences, the signature check, the problem,
    # the token-by-token drivers, the state rows); a family includes it and never another family.
    "src/ops/recurrence": PUBLIC | {"core", "kernels", "ops/recurrence"},
    "src/ops/decay": PUBLIC | {"core", "kernels", "feature_maps", "io", "ops/recurrence", "ops/decay"},
    "src/ops/delta": PUBLIC | {"core", "kernels", "feature_maps", "io", "ops/recurrence", "ops/delta"},
    "src/ops/dplr": PUBLIC | {"core", "kernels", "feature_maps", "io", "ops/recurrence", "ops/dplr"},
    "src/capi": PUBLIC | {"capi"},
    "src/distributed": PUBLIC | {"core", "kernels", "feature_maps", "distributed"},
    "src/model": PUBLIC | {"core", "io", "kernels/gelu.hpp", "model"},
    "tools/quality": PUBLIC,
    "include/linattn": PUBLIC,
    "table": PUBLIC | {"."},
    "tools": PUBLIC | {"common", "commands", "operator_table.hpp", "."},
    "python/src": PUBLIC | {"."},
    "bench": PUBLIC | {"baseline", "operator_table.hpp", "."},
    "examples": PUBLIC | {"."},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".cpp", ".hpp", ".h", ".c")


def allowed(target: str, rules: set) -> bool:
    for rule in rules:
        if rule == "." and "/" not in target:
            return True
        if target == rule or target.startswith(rule + "/"):
            return True
    return False


def main() -> int:
    violations = []
    for folder, rules in LIBRARY_BELOW.items():
        base = ROOT / folder
        if not base.exists():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in SOURCES:
                continue
            # A deeper folder with rules of its own is checked under those.
            rel = path.relative_to(ROOT).as_posix()
            owner = max((f for f in LIBRARY_BELOW if rel.startswith(f + "/")), key=len)
            if owner != folder:
                continue
            for target in INCLUDE.findall(path.read_text(encoding="utf-8")):
                if not allowed(target, rules):
                    violations.append(f'{rel}: includes "{target}", which {folder}/ may not '
                                      f'(allowed: {", ".join(sorted(rules))}; docs/architecture.md)')
    for v in violations:
        print(v)
    print(f"layering: {len(violations)} violation(s)" if violations else "layering: every include follows the rules")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
