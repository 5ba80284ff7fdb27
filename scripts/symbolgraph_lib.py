"""Symbol graphs of this package's library modules, shared by scripts/check-doc-comments and
scripts/docs: which modules the library products contain, and their symbol graphs extracted
from the debug build already in .build (what `swift package dump-symbol-graph` writes, without
the rebuild it would start)."""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = "x86_64-unknown-linux-gnu"


def build_flags():
    """The flags of every build of ours (scripts/build-flags)."""
    with open(os.path.join(ROOT, "scripts", "build-flags"), encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip() and not line.startswith("#")]


def describe(tool):
    """`swift package describe --type json` of this package (no build)."""
    run = subprocess.run(["swift", "package", "describe", "--type", "json"], cwd=ROOT,
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("%s: swift package describe failed:\n%s" % (tool, run.stderr))
    return json.loads(run.stdout[run.stdout.index("{"):])


def library_modules(tool):
    """The Swift targets the library products contain, with their target dependencies."""
    description = describe(tool)
    targets = {target["name"]: target for target in description["targets"]}
    pending = [name for product in description["products"] if "library" in product["type"]
               for name in product["targets"]]
    modules = set()
    while pending:
        name = pending.pop()
        target = targets.get(name)
        if target is None or name in modules:
            continue
        if target.get("module_type") == "SwiftTarget":
            modules.add(name)
        pending.extend(target.get("target_dependencies", []))
    return sorted(modules)


def include_flags(tool):
    """Compiler flags that find the debug build's modules and our C modules."""
    modules = os.path.join(ROOT, ".build", "debug", "Modules")
    if not os.path.isdir(modules):
        sys.exit("%s: no debug build in .build/debug: run `swift build` first" % tool)
    flags = ["-I", modules]
    for directory in sorted(glob.glob(os.path.join(ROOT, "Sources", "CCF*"))):
        if os.path.exists(os.path.join(directory, "module.modulemap")):
            flags += ["-I", directory]
    for modulemap in glob.glob(os.path.join(ROOT, ".build", TARGET, "debug", "*.build", "module.modulemap")):
        flags += ["-Xcc", "-fmodule-map-file=" + modulemap]
    # C modules of dependencies (swift-system's CSystem, which FileDescriptor's module imports).
    for modulemap in sorted(glob.glob(os.path.join(ROOT, ".build", "checkouts", "*", "Sources", "*", "include",
                                                   "module.modulemap"))):
        flags += ["-Xcc", "-fmodule-map-file=" + modulemap, "-I", os.path.dirname(modulemap)]
    return flags


def extract(tool, modules, out, flags):
    """Writes the public symbol graphs of `modules` into `out` (`M.symbols.json`, `M@Other…`)."""
    for module in modules:
        run = subprocess.run(["swift", "symbolgraph-extract", "-module-name", module, "-target", TARGET,
                              "-minimum-access-level", "public", "-output-dir", out] + flags,
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("%s: symbolgraph-extract of %s failed:\n%s" % (tool, module, run.stderr))
