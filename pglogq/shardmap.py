"""``pglogq.shardmap`` is :mod:`pglogq.cluster.shardmap` (the shard map of a cluster).

The module moved into ``pglogq.cluster``; this name, which programs may import
(``pglogq.shardmap.shard_dsn``), stays and is the same module object.
"""

import sys

from pglogq.cluster import shardmap as _module
from pglogq.cluster.shardmap import *  # noqa: F403  (the names type checkers see here)

sys.modules[__name__] = _module
