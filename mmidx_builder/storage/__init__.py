"""Bytes of files, local and remote: the lowest layer above errors, checks and dtypes.

Owns: atomic writes and file identity (files.py), local files read through their map without
SIGBUS (mapped.py), the reader seam every token file is read through and its local readers
(bin_readers.py), opening the two files of a pair wherever they are (pairs.py), index arrays
cached as .npy files (array_cache.py) and the remote reader (remote/).

May import: errors, checks, dtypes. Knows no token format: it reads bytes and runs of
fixed-size items, never an .idx header.
"""
