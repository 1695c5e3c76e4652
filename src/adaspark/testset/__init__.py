"""The six-source conversation test set of the paper's Appendix A (issue 4).

- :mod:`.model`: the set files' records, JSON form and hashes;
- :mod:`.rules`: the selection rule and the named format edits;
- one module per source (:mod:`.specbench`, :mod:`.speedbench`, :mod:`.wildchat`,
  :mod:`.convfinqa`, :mod:`.toolace`, :mod:`.longbench`), each reading its rows from the hub at
  the pinned revision or from a local mirror, then applying the same rule;
- :mod:`.readers`: the two ways rows are read;
- :mod:`.lock`: the committed lock and the check naming every conversation that moved;
- :mod:`.build`: the sources in order, with the vendored copy as the fallback;
- :mod:`.subsets`: ``evaluation``, ``heldout``, ``short``, ``smoke`` and ``all``;
- :mod:`.microbench`: the verify-time survey's context prompts.

The stage entry point is :mod:`adaspark.stages.testset`.
"""

from adaspark.testset.lock import LockMismatchError, load_checked_sets
from adaspark.testset.model import SET_NAMES, Conversation, SetFile, Turn, is_placeholder
from adaspark.testset.subsets import Subset, make_subset

__all__ = [
    "SET_NAMES",
    "Conversation",
    "LockMismatchError",
    "SetFile",
    "Subset",
    "Turn",
    "is_placeholder",
    "load_checked_sets",
    "make_subset",
]
