"""The tracked tree, shipped adapters included, stays within its size budget.

The size is the sum of the sizes of the files `git ls-files` lists (what a clone checks out), as
``git ls-files -z | xargs -0 du -cb`` reports it. Large results are committed gzipped
(benchmarks/results/README.md), plots are drawn on demand, and an adapter directory carries what rhea
changes in the base tokenizer rather than a copy of it. The shipped adapters' weights are most of the
tree (``rhea/data/adapters``: 46.7 MB, 27.7 MB of it the capable model's compress LoRA); the budget
leaves room for code, docs and small results, not for another copy of any of them.

Skipped outside a git checkout (an unpacked archive or an installed package has no `git ls-files`).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The most the tracked tree may hold, in bytes (decimal megabytes, as ``du -cb`` counts bytes).
TREE_BUDGET_BYTES = 60_000_000


def tracked_files() -> list[Path]:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("git is not available here")
    if done.returncode != 0 or not done.stdout:
        pytest.skip("not a git checkout (no tracked files)")
    return [REPO / name for name in done.stdout.decode("utf-8", errors="surrogateescape").split("\0") if name]


def test_the_tracked_tree_stays_within_its_budget():
    sizes = {p: p.lstat().st_size for p in tracked_files() if p.exists() or p.is_symlink()}
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:8]
    listing = "\n".join(f"  {size / 1e6:7.2f} MB  {path.relative_to(REPO)}" for path, size in largest)
    assert total <= TREE_BUDGET_BYTES, (
        f"the tracked tree holds {total / 1e6:.1f} MB, over its {TREE_BUDGET_BYTES / 1e6:.0f} MB budget; gzip large "
        f"results (benchmarks/results/README.md), leave plots and tokenizer copies out. Largest files:\n{listing}")
    assert total > 1_000_000  # the tree was measured, not an empty listing
