"""Runs: one arm over a subset of the test set, over HTTP (§4.1, Appendix A).

- ``settings``: the ``run`` config group and an arm's entry;
- ``rows``: the reply-row schema (one Parquet row per timed reply) and its statuses;
- ``store``: a run directory's files, written incrementally and atomically;
- ``conversation``: the subset's plan and how each reply's history is built;
- ``fingerprint``: what a run must match to be resumed;
- ``launch``: starting the arm's server;
- ``order``: the run order (sequential, or a group's arms interleaved reply by reply);
- ``progress``: the progress display and the end-of-run summary;
- ``run``: the loop over conversations, turns and replies.
"""
