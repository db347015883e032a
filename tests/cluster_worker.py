"""Run by tests/test_cluster.py on every rank of a simulated cluster:

    cluster_worker.py OUT

writes OUT/rank{r}.json with where the rank runs (bert_tf.train.distributed.placement()).
"""

import json
import sys
from pathlib import Path

from bert_tf.train import distributed

if __name__ == "__main__":
    distributed.init()
    place = distributed.placement()
    Path(sys.argv[1], f"rank{place['rank']}.json").write_text(json.dumps(place))
    distributed.barrier()
