"""The pure parts of the survey and Figure 5 stages, the renderers, the paper's values and the
presets (no model is loaded here)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from adaspark.analysis import paper_values
from adaspark.analysis.tables.render import cell_text, ci_text, width_ranges
from adaspark.config import compose
from adaspark.replay.survey import survey_medians
from adaspark.stages.fig5 import Fig5Settings, pinned_arm
from adaspark.stages.survey import SurveySettings, pass_orders, survey_rows


class FakeTarget:
    """Verify time = width ms plus 1 ms per verify already made in this run (a warm-up drift)."""

    max_rows = 64

    def __init__(self) -> None:
        self.committed: list[int] = []
        self.calls: list[int] = []

    def prefill(self, tokens: list[int]) -> float:
        self.committed = list(tokens)
        return 0.0

    def verify(self, tree: Any) -> Any:
        self.calls.append(tree)
        return SimpleNamespace(verify_s=(tree + 0.001 * len(self.calls)) / 1000)

    def discard(self) -> None:
        pass


def test_survey_passes_alternate_and_drop_the_first_rounds() -> None:
    assert pass_orders([8, 2, 4], 2) == [[2, 4, 8], [8, 4, 2]]
    s = SurveySettings(widths=(2, 4, 8), passes=2, rounds=4, dropped_rounds=2)
    t = FakeTarget()
    rows = survey_rows(t, lambda committed: {2: 2, 4: 4, 8: 8},
                       [("443A", 443, 443, [1] * 443)], s)
    assert t.calls == [2] * 4 + [4] * 4 + [8] * 4 + [8] * 4 + [4] * 4 + [2] * 4
    assert sum(r["kept"] for r in rows) == 3 * 2 * 2
    med = survey_medians(__import__("pandas").DataFrame(rows)).set_index("width")
    assert med.loc[8, "verify_ms"] == pytest.approx(8, abs=0.1)
    assert med.loc[8, "n_runs"] == 2


def test_settings_refuse_unknown_keys_and_empty_runs() -> None:
    with pytest.raises(ValueError, match="unknown key"):
        SurveySettings.from_section({"widht": [2]})
    with pytest.raises(ValueError, match="nothing would be kept"):
        SurveySettings.from_section({"rounds": 2, "dropped_rounds": 2})
    assert Fig5Settings.from_section({"widths": [8, 16]}).widths == (8, 16)


def test_fig5_uses_the_pinned_arm_with_ngram_off() -> None:
    params = {"arms": {"adaspark-w8": {"name": "adaspark-w8", "width_rule": "adaspark",
                                       "width": 8, "ngram": True, "store": "x"},
                       "adaspark": {"name": "adaspark", "width_rule": "adaspark",
                                    "rule": {"width": "learned", "ngram": True}}}}
    a = pinned_arm(params, 8)
    assert a["ngram"] is False and a["width"] == 8 and a["store"] is None
    b = pinned_arm(params, 16)
    assert b["rule"]["width"] == 16 and b["rule"]["ngram"] is False
    assert params["arms"]["adaspark"]["rule"]["ngram"] is True  # not modified


def test_renderers() -> None:
    assert width_ranges([2, 3, 4, 6, 8, 9, 10, 12, 64]) == "2–4, 6, 8–10, 12, 64"
    assert width_ranges([8, 9]) == "8, 9"
    assert ci_text(1.8712, 1.8, 1.953) == "1.87× [1.80, 1.95]"
    assert cell_text(float("nan")) == "–" and cell_text(-0.01, "{:.2f}") == "−0.01"


def test_paper_values_hold_every_table_and_figure() -> None:
    for i in range(1, 11):
        t = paper_values.paper_table(f"table{i}")
        assert len(t) >= 4 and t.attrs["section"].startswith("§")
    assert paper_values.paper_table("table4").iloc[0]["AdaSpark / llama.cpp"] == \
        "1.87× [1.80, 1.95]"
    for i in range(3, 11):
        assert paper_values.paper_figure(f"fig{i}")["title"]
    assert paper_values.paper_figure("fig3")["caption"]["T16_over_T2_at_1596"]["Qwen3-4B"] == 1.57


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_presets_compose_into_the_config(preset: str, tmp_path: Path) -> None:
    """The preset group, added after _self_ in a copy of conf/config.yaml's defaults list."""
    conf = tmp_path / "conf"
    shutil.copytree(Path(__file__).resolve().parents[2] / "conf", conf)
    text = (conf / "config.yaml").read_text()
    if "- preset:" not in text:
        extra = "" if "- run:" in text else "  - run: default\n"
        text = text.replace("  - _self_\n", extra + "  - _self_\n  - preset: default\n")
        (conf / "config.yaml").write_text(text)
    cfg = compose([f"preset={preset}"], conf_dir=conf)
    assert cfg.preset.name == preset
    assert cfg.run.subset == ("evaluation" if preset == "paper" else "short")
    assert list(cfg.extra_runs.instrumented.arms)[:2] == ["adaspark", "costmodel"]
    if preset == "default":  # the DSpark drafter's D for cpu-measured
        assert "adaspark-dspark" in cfg.extra_runs.instrumented.arms
    assert SurveySettings.from_section(dict(cfg.survey)).widths[0] == 1
    if preset == "paper":
        assert 63 in cfg.survey.widths and cfg.fig5.prompts_per_context == 3
        assert list(cfg.extra_runs.repeat.arms) == ["adaspark"]
    else:
        assert list(cfg.run_arms) == ["llamacpp-ar", "ar", "llamacpp-chain", "chain3",
                                      "adaspark", "adaspark-w1", "llamacpp-dspark",
                                      "chain3-dspark", "adaspark-dspark"]
    missing = [a for a in cfg.run_arms if a not in cfg.arms and not a.startswith("llamacpp")]
    assert not missing
