"""Plain decode on a one-sequence target against the tree target, in fast mode.

    python tests/decoding/plain_probe.py TARGET.gguf N_TOKENS

Run by ``tests/decoding/test_plain_target.py`` in a fast-mode subprocess (the kernel mode is per
process). Both targets decode the same prompts greedily, one after the other in one process (the
second prompt reuses the first's cache); prints one JSON object: each target's tokens, its
recorded context parameters and its widest verify, and whether the one-sequence target refused
a two-row tree.
"""

from __future__ import annotations

import json
import sys

from adaspark.decoding.engine import EngineError, Target
from adaspark.decoding.loop import generate
from adaspark.decoding.tree import chain_tree
from adaspark.rules.base import make_rule

PROMPTS = ("def fibonacci(n):\n    ",
           "The history of the printing press begins " * 40 + "\nSummarise it:")


def run(t: Target, n: int) -> list[list[int]]:
    return [generate(t, t.tokenize(p), n, make_rule("ar")).tokens for p in PROMPTS]


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2])
    out = {}
    for name, plain in (("tree", False), ("plain", True)):
        t = Target(path, 2048, exact=False, plain=plain)
        out[name] = {"tokens": run(t, n), "context": t.context_params, "max_rows": t.max_rows}
        if plain:
            t.prefill(t.tokenize(PROMPTS[0]))
            try:
                t.verify(chain_tree(t.committed[-1], [42]))
                out["refused_two_rows"] = False
            except EngineError:
                out["refused_two_rows"] = True
        t.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
