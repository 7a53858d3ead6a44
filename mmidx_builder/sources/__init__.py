"""Token sources: a file's sequences as token arrays, read in pieces.

Owns: the TokenSource protocol every source kind implements and the one bounds check every
read goes through (token_source.py), the MMIDIDX .bin/.idx pair in its Megatron and fairseq
flavours with its validating reader and writer (indexed.py), raw files read n_bytes per token
(raw.py), the PREFIX.mmidx-info sidecar and what builders record about a split (provenance.py),
and the numbers `mmidx inspect` prints (stats.py).

May import: the foundation (errors, checks, dtypes) and storage/. Never datasets, pyarrow or
torch: `import mmidx_builder.sources.indexed` stays light.
"""
