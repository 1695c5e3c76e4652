"""The tables of one fixed recorded run are the same before and after a change of code (issue 11).

``tests/fixtures/recorded_run/`` holds the ``runs/`` of a default ``dvc repro`` on a fresh clone
(the embedded pair, the ``short`` subset, cap 128; server logs left out) with the ``params.yaml``
it ran under, and ``tables/``: what the ``tables`` stage wrote from it with the code of the
commit that added the fixture. The stage is run again on the same records; every file must be
byte-identical, except the bootstrap interval bounds (``[lo, hi]`` in a formatted cell), which
only have to agree within Monte Carlo error: the bootstrap draws its resamples through
``scipy.stats.bootstrap`` now, a different stream of random indices than the hand-written
resampler that made the fixture; and full-precision floats (Table 1's csv), which agree within a
relative 1e-9 (their last digit follows the CPU's BLAS kernels). The index ``tables.json`` may
gain top-level keys that record new options (``NEW_INDEX_KEYS``); every key the fixture has must
be unchanged. Tables 4, 5, 6, 8
and 10 and their index entries were written again when the tables gained a block per drafter kind
and honest names for the draft-model arms (issue 13): only labels, the new ``drafter`` and
``baseline`` columns, captions and notes changed; every number and bound is the fixture's.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from adaspark.stages import tables as tables_stage

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "recorded_run"
BOUNDS = re.compile(r"\[(\d+\.\d+), (\d+\.\d+)\]")
# A 95% percentile bound from 2000 resamples of a handful of conversations moves by a few
# thousandths between two random streams (its Monte Carlo standard error here is about 0.003 on
# the ratio scale); the cells round to 0.01. Two rounded bounds within 0.02 agree.
BOUND_TOLERANCE = 0.02
NEW_INDEX_KEYS = {"bootstrap_method"}


def split_bounds(text: str) -> tuple[str, list[float]]:
    """``text`` with every ``[lo, hi]`` replaced by ``[·, ·]``, and the bounds in order."""
    bounds = [float(x) for m in BOUNDS.finditer(text) for x in m.groups()]
    return BOUNDS.sub("[·, ·]", text), bounds


#: A full-precision float (a csv cell of Table 1's least-squares fit): its last digits depend on
#: the CPU's BLAS kernels (they moved by an ulp between two machines of the same kind), so such
#: numbers agree within a relative 1e-9; everything else is byte-identical.
LONG_FLOAT = re.compile(r"-?\d+\.\d{12,}(?:e-?\d+)?")
FLOAT_RTOL = 1e-9


def split_long_floats(text: str) -> tuple[str, list[float]]:
    return LONG_FLOAT.sub("#", text), [float(x) for x in LONG_FLOAT.findall(text)]


def assert_same_up_to_bounds(got: str, want: str, where: str) -> None:
    got, got_floats = split_long_floats(got)
    want, want_floats = split_long_floats(want)
    assert len(got_floats) == len(want_floats), f"{where}: another count of full-precision cells"
    for g, w in zip(got_floats, want_floats, strict=True):
        assert math.isclose(g, w, rel_tol=FLOAT_RTOL), f"{where}: {g} vs the fixture's {w}"
    got_text, got_bounds = split_bounds(got)
    want_text, want_bounds = split_bounds(want)
    assert got_text == want_text, f"{where}: differs from the fixture's beyond the bounds"
    assert len(got_bounds) == len(want_bounds), where
    for g, w in zip(got_bounds, want_bounds, strict=True):
        assert abs(g - w) <= BOUND_TOLERANCE, f"{where}: bound {g} vs the fixture's {w}"


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tables stage run on the fixture's records, from a directory laid out as the
    fixture's (so that the relative paths the index records are the same)."""
    work = tmp_path_factory.mktemp("recorded")
    shutil.copytree(FIXTURE / "runs", work / "runs")
    shutil.copy(FIXTURE / "params.yaml", work / "params.yaml")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        code = tables_stage.main(["--params", "params.yaml", "--runs", "runs", "--out", "tables"])
    assert code == 0
    return work / "tables"


def fixture_files() -> list[str]:
    return sorted(p.name for p in (FIXTURE / "tables").iterdir() if p.name != "tables.json")


def test_the_fixture_holds_every_table() -> None:
    names = fixture_files()
    assert len(names) == 30 and {n.rsplit(".", 1)[1] for n in names} == {"csv", "md", "tex"}
    assert any(BOUNDS.search((FIXTURE / "tables" / n).read_text()) for n in names)


@pytest.mark.parametrize("name", fixture_files())
def test_a_table_file_is_unchanged(rebuilt: Path, name: str) -> None:
    assert_same_up_to_bounds((rebuilt / name).read_text(encoding="utf-8"),
                             (FIXTURE / "tables" / name).read_text(encoding="utf-8"), name)


def test_the_index_is_unchanged(rebuilt: Path) -> None:
    got = json.loads((rebuilt / "tables.json").read_text(encoding="utf-8"))
    want = json.loads((FIXTURE / "tables" / "tables.json").read_text(encoding="utf-8"))
    assert set(got) - set(want) <= NEW_INDEX_KEYS and set(want) <= set(got)
    for key in set(want) - {"tables"}:
        assert got[key] == want[key], key
    assert_same_up_to_bounds(json.dumps(got["tables"], ensure_ascii=False, sort_keys=True),
                             json.dumps(want["tables"], ensure_ascii=False, sort_keys=True),
                             "tables.json")


def test_a_moved_bound_is_caught() -> None:
    """The comparison can fail: a bound moved by more than the tolerance, or a changed value."""
    want = "1.09× [1.01, 1.21]"
    with pytest.raises(AssertionError, match="bound"):
        assert_same_up_to_bounds("1.09× [1.01, 1.25]", want, "cell")
    with pytest.raises(AssertionError, match="beyond the bounds"):
        assert_same_up_to_bounds("1.10× [1.01, 1.21]", want, "cell")
    assert_same_up_to_bounds("1.09× [1.02, 1.20]", want, "cell")
