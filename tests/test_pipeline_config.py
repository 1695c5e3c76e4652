"""params.yaml is conf/ composed (HARNESS's pattern); the models stage re-checks the files."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from adaspark.config import compose, to_dict
from adaspark.stages import models as models_stage

REPO = Path(__file__).resolve().parents[1]


def test_params_yaml_is_the_composed_config():
    committed = OmegaConf.to_container(OmegaConf.load(REPO / "params.yaml"), resolve=True)
    assert committed == to_dict(compose([])), (
        "params.yaml is stale: run `adaspark config format=yaml > params.yaml`"
    )


def test_every_arm_file_composes():
    for f in sorted((REPO / "conf" / "arm").glob("*.yaml")):
        cfg = compose([f"arm={f.stem}"])
        assert cfg.arm.name == f.stem, f"{f.name}: name should be {f.stem}"


def test_models_stage_records_and_refuses(tmp_path):
    params = to_dict(compose(["target=tiny", "drafter=tiny-truncated"]))
    out = tmp_path / "models.json"
    rec = models_stage.check_models(params, out)
    assert json.loads(out.read_text()) == rec
    assert rec["target"]["manifest"] == "smollm2-135m-instruct-q4_1"
    bad = tmp_path / "p.yaml"
    params["target"]["path"] = str(tmp_path / "missing.gguf")
    OmegaConf.save(OmegaConf.create(params), bad)
    assert models_stage.main(["--params", str(bad), "--out", str(out)]) == 1
