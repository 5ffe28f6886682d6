"""``pglogq.cluster_admin`` is :mod:`pglogq.cluster.cluster_admin` (the orchestrator of a cluster).

The module moved into ``pglogq.cluster``; this name, which the documentation and programs use
(``from pglogq import cluster_admin``), stays and is the same module object.
"""

import sys

from pglogq.cluster import cluster_admin as _module
from pglogq.cluster.cluster_admin import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _module
