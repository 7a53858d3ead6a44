"""MosaicML's shard formats: a folder of binary shards with every sample's place in an index.

Two generations, read as their own code reads them:

    Composer's StreamingDatasetIndex   index.mds[.gz] + 000000.mds[.gz] ...   mosaicml 0.8-0.10
    MDS (mosaicml-streaming)           index.json (version 2) + shard.00000.mds[.zstd] ...

Owns: the column encodings of MDS (encodings.py), shard compression (codecs.py) and hashes
(hashes.py), both index layouts parsed into one description of a stream (index.py), a stream's
shards opened wherever they are and its samples' bytes read in batches (shards.py), those bytes
decoded into columns (columns.py), a column of token ids as a token source (tokens.py), and
MDS folders written byte for byte as mosaicml-streaming's MDSWriter writes them (writer.py:
reader and writer of one format side by side, as in streaming/base/format/mds/), and the order
in which mosaicml-streaming's StreamingDataset reads a corpus's samples on every node, rank and
worker (order/: pure numpy, no I/O).

May import: the foundation, storage/ and sources/. Never datasets, pyarrow or torch: the
``datasets`` builder of these folders is hf/mmidx_mosaic.py, one layer up, and turns the numpy
columns decoded here into Arrow arrays.
"""
