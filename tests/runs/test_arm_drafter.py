"""Arm files that name their own drafter (issue 13, "Our engine": ``drafter: <conf/drafter
name>``): the view each reader takes (:func:`adaspark.schema.arm_view`), the parts built from it
on the real tiny model, the run stage leaving an arm out while its drafter has no file (and the
check stage saying so), and the tables expecting each arm's own drafter file.

The DSpark arms on real engines through the whole pipeline: ``tests/test_pipeline_repro.py``."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from adaspark.config import ConfigError, compose, to_dict
from adaspark.config_check import validate
from adaspark.schema import arm_view, check_arm


def arm_of(cfg, name: str):
    return check_arm(cfg.arms[name], f"arms.{name}")


def test_an_arm_naming_its_drafter_sees_that_drafter_and_the_others_the_composed_one():
    cfg = compose(["target=tiny", "drafter=tiny-truncated", "drafters.dspark.path=d.gguf"])
    own = arm_view(cfg, arm_of(cfg, "chain3-dspark"))
    assert own.drafter.kind == "dspark" and own.drafter.path == "d.gguf"
    assert own.target.name == cfg.target.name
    assert arm_view(own, arm_of(cfg, "chain3-dspark")).drafter == own.drafter  # idempotent
    plain = arm_view(cfg, arm_of(cfg, "chain3"))
    assert plain is cfg and plain.drafter.kind == "draft-model"
    # the llama.cpp baseline of the DSpark block names it too, and runs draft-dspark on it
    base = arm_of(cfg, "llamacpp-dspark")
    assert base.drafter == "dspark" and base.server.spec_type == "draft-dspark"
    assert arm_of(cfg, "llamacpp-chain").drafter is None


def test_an_arm_naming_a_drafter_not_composed_is_refused_naming_the_fix():
    cfg = compose(["target=tiny", "arm=chain3", "+arm.drafter=nosuch"])
    with pytest.raises(ConfigError, match=r"names drafter 'nosuch'.*drafter@drafters.nosuch"):
        validate(cfg, command="generate")


def test_building_an_arm_whose_drafter_has_no_file_names_the_key_to_set():
    from adaspark import arms

    cfg = compose(["target=tiny", "drafter=dspark", "drafter.path=elsewhere.gguf"])
    with pytest.raises(ConfigError, match=r"set drafters\.dspark\.path=FILE.*drafter\.path "
                                          "does not reach it"):
        arms.build(cfg, arm_of(cfg, "chain3-dspark"), exact=True)


def test_the_parts_of_each_arm_load_its_own_drafter(tiny_path, tmp_path):
    from adaspark import arms
    from adaspark.decoding.drafter import dspark_file as dsf
    from adaspark.decoding.drafter.draft_model import DraftModelDrafter
    from adaspark.decoding.drafter.dspark import DSparkDrafter

    path = dsf.write_random(tiny_path, tmp_path / "r.gguf", seed=1,
                            shape=dsf.DrafterShape(block_size=4))
    cfg = compose(["target=tiny", "drafter=tiny-truncated", f"drafters.dspark.path={path}"])
    for name, kind, block in (("chain3-dspark", DSparkDrafter, 4),
                              ("chain3", DraftModelDrafter, int(cfg.drafter.block_positions))):
        parts = arms.build(cfg, arm_of(cfg, name), exact=True)
        try:
            assert isinstance(parts.drafter, kind), name
            assert parts.block_positions == block, name
            assert parts.models["drafter"]["path"] == str(
                path if name == "chain3-dspark" else parts.models["drafter"]["path"])
        finally:
            parts.close()


def _params(tmp_path, *extra: str):
    from adaspark.runs.run import compose_for_run

    cfg = compose_for_run(["target=tiny", "drafter=tiny-truncated", "run.testset=data/testset",
                           "run.subset=smoke", "run_arms=[chain3,chain3-dspark]", *extra])
    params = tmp_path / "params.yaml"
    OmegaConf.save(OmegaConf.create(to_dict(cfg)), params)
    return cfg, params


def test_the_run_stage_leaves_out_an_arm_whose_drafter_has_no_file(tmp_path, capsys):
    from adaspark.runs.settings import RunSettings
    from adaspark.runs.store import NOT_RUN_FILE
    from adaspark.stages import run as run_stage
    from adaspark.stages.check import check_arm as check_one
    from adaspark.testset import load_checked_sets

    cfg, params = _params(tmp_path)
    out = tmp_path / "arms" / "chain3-dspark"
    assert run_stage.main(["--arm", "chain3-dspark", "--params", str(params),
                           "--out", str(out)]) == 0
    # the DSpark arms' drafter is this project's own for the embedded target, not tiny's
    assert "trained for the target" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [NOT_RUN_FILE]
    assert "drafters.dspark.path" in json.loads((out / NOT_RUN_FILE).read_text())["not_run"]

    settings = RunSettings.from_config(cfg)
    sets = load_checked_sets(settings.testset_dir())
    checked = check_one(cfg, "chain3-dspark", out, settings, sets)
    assert checked.problems == [] and "drafters.dspark.path" in checked.not_run
    # once the file is set, the mark is not an excuse any more
    with_file = OmegaConf.merge(cfg, {"drafters": {"dspark": {"path": str(params)}}})
    again = check_one(with_file, "chain3-dspark", out, settings, sets)
    assert again.not_run is None and "drafter file is set now" in again.problems[0]

    # results of an earlier run there are not this config's: refused, or cleared on restart
    (out / "replies.parquet").write_bytes(b"earlier")
    argv = ["--arm", "chain3-dspark", "--params", str(params), "--out", str(out)]
    assert run_stage.main(argv) == 1
    assert "holds results of an earlier run" in capsys.readouterr().err
    assert run_stage.main([*argv, "--on-mismatch", "restart"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [NOT_RUN_FILE]


def test_the_tables_expect_each_arms_own_drafter_file():
    from adaspark.analysis.run_selection import selection_from_params

    cfg = compose(["target=tiny", "drafter=tiny-truncated", "drafters.dspark.path=/x/d.gguf",
                   "run_arms=[chain3,chain3-dspark]"])
    sel = selection_from_params(to_dict(cfg))

    def drafter_mismatches(file: str, name: str) -> list:
        meta = {"fingerprint": {"models": {"drafter": {"file": file, "sha256": None}},
                                "run": {}}}
        return [(m.key, m.expected, m.source) for m in sel.mismatches(meta, "arms", name)
                if m.key.startswith("models.drafter")]

    assert drafter_mismatches("d.gguf", "chain3-dspark") == []
    assert drafter_mismatches("other.gguf", "chain3-dspark") == [
        ("models.drafter.file", "d.gguf", "drafters.dspark.model or drafters.dspark.path")]
    # the arms without their own drafter still expect the composed one
    assert "models.drafter.file" in [k for k, *_ in drafter_mismatches("d.gguf", "chain3")]
