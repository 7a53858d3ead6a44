"""How the epoch's samples become batches, as StreamingDataset's ``batching_method`` says:
``random`` (streams mixed), ``stratified`` (each global batch in the streams' proportions),
``per_stream`` (each global batch from one stream), ``device_per_stream`` (each device batch
from one stream).

Follows mosaicml-streaming 0.13.0's ``generate_work`` and the four methods it registers
(streaming/base/batching/), one module each; global_batches.py holds the steps the last three
share. Every method returns the whole epoch dealt as (nodes, ranks per node, workers per rank,
batches per worker, batch size), -1 for padding, as theirs.
"""

from __future__ import annotations

import numpy as np

from ..epoch import Epoch
from .device_per_stream import device_per_stream_batching
from .per_stream import per_stream_batching
from .random import random_batching
from .stratified import stratified_batching

BATCHINGS = {"random": random_batching, "stratified": stratified_batching, "per_stream": per_stream_batching,
             "device_per_stream": device_per_stream_batching}


def epoch_work(epoch: Epoch) -> np.ndarray:
    return BATCHINGS[epoch.settings.batching_method](epoch)
