"""Analysis: everything that reads results and makes the paper's outputs.

- ``records``: a run directory's records, which run directories a preset reads, and their checks;
- ``stats``: decode speeds, arm comparisons and bootstrap intervals (§4.1);
- ``bootstrap``: the bootstrap interval over conversations (``scipy.stats.bootstrap``, §4.1);
- ``survey``: the verify-cost survey's medians and fits (Table 1, Figure 3);
- ``tables``, ``figures``: Tables 1-10 and Figures 3-10, one module each;
- ``outputs``: the registry and build loop the two share;
- ``report``: the report (Markdown, HTML, LaTeX) beside the paper's values (``paper_values``).
"""
