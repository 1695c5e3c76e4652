"""Width rules: what a round verifies (Algorithm 1, lines 5-12).

Each rule implements :class:`adaspark.decoding.round.WidthRule` (the interface and the round
records it exchanges with the loop live with the loop, in :mod:`adaspark.decoding.round`).

- ``base``: the registry of rules by config name;
- ``fixed``: the fixed rules (autoregressive, chain, pinned width);
- ``adaspark``: the AdaSpark scheduler (§3), one module per mechanism.

An arm's config (``conf/arm/``) becomes its drafter and rule in :mod:`adaspark.arms`.
"""
