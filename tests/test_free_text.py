"""Free text on the command line is taken verbatim (HARNESS "Free text on the command line"):
no Hydra grammar, no OmegaConf interpolation, no escapes."""

from __future__ import annotations

import json
import random

from helpers import run_cli
from omegaconf import OmegaConf

from adaspark.config import compose, to_dict, verbatim

TRICKY = [
    "What is ${arm.name}?",
    "${oc.env:HOME}",
    "${HOME}",
    r"a\b and a \n that is not a newline",
    r"\${x}",
    r"\\${x}",
    "${",
    "${a",
    "${}",
    "x\\",
    "cost = $5, {braces} and } alone",
]


def test_tricky_prompts_reach_the_config_unchanged():
    for text in TRICKY:
        cfg = compose([f"prompt={text}", f"system={text}", "arm=chain3"])
        assert cfg.prompt == text and cfg.system == text
        assert to_dict(cfg)["prompt"] == text
        # and through params.yaml (adaspark config format=yaml, then read back)
        assert OmegaConf.create(OmegaConf.to_yaml(cfg)).prompt == text


def test_verbatim_round_trips_random_strings():
    rng = random.Random(7)
    alphabet = ["$", "{", "}", "\\", "a", ":", "'", '"', " ", "."]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        cfg = OmegaConf.create({"arm": {"name": "chain3"}})
        cfg.prompt = verbatim(text)
        assert cfg.prompt == text, (text, verbatim(text))
        assert OmegaConf.to_container(cfg, resolve=True)["prompt"] == text


def test_generate_echoes_prompt_and_system_exactly():
    prompt = r"What is ${arm.name}? Not ${oc.env:HOME}, not ${HOME}, and \${x} a\b"
    system = "Answer ${arm.name} briefly \\"
    p = run_cli("generate", "arm=chain3", "target=tiny", "drafter=tiny-truncated",
                f"prompt={prompt}", f"system={system}", "max_tokens=4", "json=true")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["prompt"] == prompt
    assert out["system"] == system
    assert out["meta"]["config"]["prompt"] == prompt
    assert out["prompt_tokens"] > 0
