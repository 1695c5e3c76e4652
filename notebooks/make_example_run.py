"""Write the notebooks' committed example run, ``notebooks/example-run/`` (SYNTHETIC).

    .venv/bin/python notebooks/make_example_run.py

It is made up: per-reply rows drawn by ``tests/analysis/synthetic_runs.py`` (the tests' synthetic
run maker) for the default
pipeline's arms, and one instrumented AdaSpark run of the real scheduler against the seeded
simulator (:mod:`adaspark.rules.adaspark.simulator`), laid out as the pipeline lays out ``runs/``:

    example-run/arms/<arm>/replies.parquet           as runs/arms/<arm>/
    example-run/extra/instrumented/adaspark/rounds/  as runs/extra/instrumented/adaspark/
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "analysis"))

from synthetic_runs import make_synthetic_runs  # noqa: E402  (a test helper, from tests/)

OUT = HERE / "example-run"
README = """# Example run (SYNTHETIC: it measures nothing)

A small made-up run directory for `rounds.ipynb` and `arms.ipynb`, written by
`notebooks/make_example_run.py` (seed {seed}). Per-reply rows are drawn from fixed per-arm speed
levels (`tests/analysis/synthetic_runs.py`); the instrumented AdaSpark run is the real scheduler
against the seeded simulator (`adaspark.rules.adaspark.simulator`), so its per-round log has the
real schema.
Every `run.json` says `"synthetic": true`. The layout is the pipeline's:

- `arms/<arm>/` as `runs/arms/<arm>/` (per-reply rows of each arm);
- `extra/instrumented/adaspark/` as `runs/extra/instrumented/adaspark/` (its `rounds/` is the
  per-round log).

Point the notebooks at a real run with their parameters cell (or the environment variables
`ADASPARK_RUNS_DIR` and `ADASPARK_ROUNDS_DIR`).
"""


def main(seed: int = 0) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_synthetic_runs(Path(tmp), preset="default", seed=seed,
                                   conversations_per_source=1, turns=2,
                                   instrumented_tokens=64)
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir(parents=True)
        shutil.copytree(root / "arms", OUT / "arms")
        shutil.copytree(root / "extra" / "instrumented" / "adaspark",
                        OUT / "extra" / "instrumented" / "adaspark")
    (OUT / "README.md").write_text(README.format(seed=seed))
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
