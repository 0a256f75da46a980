#!/usr/bin/env python3
"""tests/layout/check_layout.py — the repository's shape, checked.

    python3 tests/layout/check_layout.py SOURCE_ROOT

Fails (exit 1, one line per problem) when:

1. a layer includes a layer above it, or another layer's internal header.
   The layers, bottom up: process/ (the base), engine/, relay/, cmd/.
   A layer includes the layers below it through their public headers
   (<stepx/...>); the base layer's internal headers listed in
   SHARED_BASE are shared with every layer above by design (they are
   compiled into the same library), and engine/'s and relay/'s own
   internal headers are private to their folder;
2. a source file of the product (engine/, process/, relay/, cmd/) is over
   MAX_LINES lines and its opening comment does not say why it is one
   piece (the words "one piece" in its first comment);
3. a document is named that the repository does not hold: any FOO.md
   mentioned in a source, test, script, meson file or document must exist
   (in docs/, beside the file, or at the path given), and no file points
   outside the repository (../shared, "design notes", "design brief");
4. docs/ARCHITECTURE.md's file map leaves out a folder or a file of the
   product, the tests' folders, or the tools (bench/, scripts/, examples/),
   or names a file that does not exist.
"""
import os
import re
import subprocess
import sys

MAX_LINES = 700
LAYERS = ["process", "engine", "relay", "cmd"]
# Internal headers of the base layer that the layers above may include.
SHARED_BASE = {"process/fault.h", "process/hostport.h", "process/mapentry.h",
               "process/pack.h",
               "process/utf8.h", "process/mpformat.h",
               "process/mailbox.h", "process/output.h", "process/msgpack.h"}
PUBLIC = {"stepx/process.h": "process", "stepx/engine.h": "engine",
          "stepx/relay.h": "relay", "stepx/stepx.h": "relay"}


def tracked(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        # The file list is git's: a source tree without .git (a release
        # tarball) cannot be checked. 77 is meson's "skipped".
        print("layout: skipped: the source tree is not a git checkout")
        sys.exit(77)
    return [p for p in out.splitlines() if os.path.exists(os.path.join(root, p))]


def layer_of(path):
    top = path.split("/", 1)[0]
    return top if top in LAYERS else None


def check_includes(root, files, problems):
    inc = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
    for f in files:
        if not f.endswith((".c", ".h")):
            continue
        me = layer_of(f)
        if me is None:
            continue
        text = open(os.path.join(root, f), encoding="utf-8").read()
        for kind, name in inc.findall(text):
            if name in PUBLIC or name.startswith("stepx/"):
                owner = PUBLIC.get(name)
                if owner is None:
                    problems.append(f"{f}: includes <{name}>, not a public header")
                elif LAYERS.index(owner) > LAYERS.index(me):
                    problems.append(f"{f}: includes <{name}> of {owner}/, a layer above {me}/")
                continue
            if kind == "<":
                continue  # system and library headers
            if name.endswith("/stepx/process.h") or name.endswith("/stepx/relay.h") \
                    or name.endswith("/stepx/engine.h") or name.endswith("/stepx/stepx.h"):
                owner = name.split("/", 1)[0]
            else:
                owner = layer_of(name)
            if owner is None:
                continue
            if owner == me:
                continue
            if LAYERS.index(owner) > LAYERS.index(me):
                problems.append(f'{f}: includes "{name}" of {owner}/, a layer above {me}/')
            elif owner == "process" and name in SHARED_BASE:
                continue
            elif "/stepx/" in name:
                continue
            else:
                problems.append(f'{f}: includes "{name}", an internal header of {owner}/ '
                                f"(use its public header)")


def check_lengths(root, files, problems):
    for f in files:
        if layer_of(f) is None or not f.endswith((".c", ".h")):
            continue
        text = open(os.path.join(root, f), encoding="utf-8").read()
        n = text.count("\n")
        if n <= MAX_LINES:
            continue
        m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
        head = " ".join(m.group(1).split()) if m else ""
        if "one piece" not in head:
            problems.append(f"{f}: {n} lines, over {MAX_LINES}, and its opening "
                            "comment does not say why it is one piece")


DOC = re.compile(r"(?<![\w./-])((?:[\w.][\w.-]*/)*[A-Z][A-Z0-9_-]*\.md)\b")
OUTSIDE = re.compile(r"\.\./shared|shared/design|design notes|design brief", re.I)


def check_docs(root, files, problems):
    have = set(files)
    names = {os.path.basename(p) for p in files if p.endswith(".md")}
    for f in files:
        if f.startswith("tests/fuzz/corpus/") or f.startswith("bench/results/"):
            continue
        if f == "tests/layout/check_layout.py":
            continue
        if not f.endswith((".c", ".h", ".md", ".build", ".sh", ".py", ".txt",
                           ".pml", ".go", ".erl", ".cpp", "run", ".clang-format")):
            continue
        try:
            text = open(os.path.join(root, f), encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                problems.append(f"{f}:{i}: points outside the repository: {line.strip()[:80]}")
            for ref in DOC.findall(line):
                base = os.path.basename(ref)
                here = os.path.normpath(os.path.join(os.path.dirname(f), ref))
                if ref in have or here in have or ("docs/" + ref) in have:
                    continue
                if "/" not in ref and base in names:
                    continue
                problems.append(f"{f}:{i}: names {ref}, which the repository does not hold")


def check_map(root, files, problems):
    arch = open(os.path.join(root, "docs/ARCHITECTURE.md"), encoding="utf-8").read()
    for f in files:
        top = f.split("/", 1)[0]
        if top in LAYERS and f.endswith((".c", ".h", "meson.build")):
            want = f
        elif top in ("bench", "scripts", "examples") and "/" in f \
                and not f.startswith("bench/results/"):
            want = f
        else:
            continue
        if f.endswith("meson.build"):
            continue  # every folder has one; the folders are checked below
        if want not in arch and ("`" + os.path.basename(f) + "`") not in arch:
            problems.append(f"docs/ARCHITECTURE.md: the file map leaves out {want}")
    have = set(files)
    for ref in sorted(set(re.findall(r"`((?:engine|process|relay|cmd|bench|scripts|examples|tests)/[\w./-]+\.(?:c|h|py|sh|cpp|go|erl))`", arch))):
        if ref not in have:
            problems.append(f"docs/ARCHITECTURE.md: names {ref}, which does not exist")
    folders = {os.path.dirname(f) for f in files
               if f.split("/", 1)[0] in LAYERS + ["tests", "bench", "scripts", "examples"]}
    for d in sorted(folders):
        if d.startswith("tests/fuzz/corpus") or d.startswith("bench/results"):
            continue
        if d + "/" not in arch and ("`" + d + "`") not in arch:
            problems.append(f"docs/ARCHITECTURE.md: the file map leaves out the folder {d}/")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = tracked(root)
    problems = []
    check_includes(root, files, problems)
    check_lengths(root, files, problems)
    check_docs(root, files, problems)
    check_map(root, files, problems)
    for p in problems:
        print(p)
    print(f"layout: {len(files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
