"""The AdaSpark scheduler (§3), one module per mechanism.

- ``config``: Table 14's constants, loaded from ``conf/scheduler/adaspark.yaml``;
- ``candidate_tree``: one round's candidates and their Eq. (6) features (§2.2);
- ``ngram``: the n-gram index over the request's text and its chains (§3.3);
- ``acceptance``: Eq. (6), the head-based estimate and the guard (§3.3);
- ``cost_model``: the learned width table and the per-class context law (§3.2);
- ``chooser``: Eq. (7), rho, the gains and the hysteresis (§3.4);
- ``scheduler``: the ``adaspark`` width rule, Algorithm 1 lines 4-18;
- ``records``, ``store``: per-request and per-round records, the persisted store;
- ``simulator``: a seeded environment that plays the engine's part.
"""
