"""A copy of this checkout with the core compiled as the wheel compiles it, to measure that build.

  /work/venv/bin/python bench/compiled_tree.py /tmp/compiled          # compiled (~1 min)
  /work/venv/bin/python bench/compiled_tree.py /tmp/pure --pure       # the same files, pure

The venv's editable install is always pure Python (hatch_build.py leaves editable installs alone),
so the benchmarks would otherwise never see the compiled build. This copies the working tree (the
files git tracks or would track, edits included) to DEST, builds the wheel with
THINKPROXY_COMPILE=require and puts its extensions beside their sources, as `.ci/run` does for
the suite's compiled run. Then:

  bench/run.py --tree /tmp/compiled --before /tmp/pure   # compiled (and its variants) vs pure
  bench/cost_pairs.py --compare 'PYTHONPATH=/tmp/compiled vs PYTHONPATH=/tmp/pure'
  bench/instructions.py --compare 'PYTHONPATH=/tmp/compiled vs PYTHONPATH=/tmp/pure'

Do not copy the extensions into this checkout instead: they would shadow edits to their sources.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Left in every tree this makes: only such a directory is replaced.
MARK = ".compiled_tree"


def copy_tree(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        source = REPO / os.fsdecode(raw)
        if source.is_file():
            target = dest / os.fsdecode(raw)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def add_extensions(dest: Path) -> list[str]:
    with tempfile.TemporaryDirectory() as wheels:
        env = os.environ | {"THINKPROXY_COMPILE": "require"}
        command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, str(dest)]
        subprocess.run(command, env=env, check=True)
        (wheel,) = Path(wheels).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            names = [name for name in archive.namelist() if name.endswith((".so", ".pyd"))]
            archive.extractall(dest, names)
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dest", type=Path, help="where to make the copy (replaced if it exists)")
    p.add_argument("--pure", action="store_true", help="copy only: the same files, not compiled")
    args = p.parse_args()
    dest = args.dest.resolve()
    if dest == REPO or REPO in dest.parents:
        p.error(f"{dest} is inside this checkout; choose a directory outside it")
    if dest.exists() and any(dest.iterdir()) and not (dest / MARK).exists():
        p.error(f"{dest} exists and was not made by this tool; choose a new or empty directory")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    (dest / MARK).write_text("made by bench/compiled_tree.py; it replaces this directory when asked to\n")
    copy_tree(dest)
    if not args.pure:
        names = add_extensions(dest)
        print(f"{len(names)} compiled extensions in {dest}")
    label = subprocess.run(
        [sys.executable, "-c", "from proxy.build_info import build_label; print(build_label())"],
        cwd=dest,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"{dest}: {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
