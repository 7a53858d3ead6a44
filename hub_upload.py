#!/usr/bin/env python
"""Publish a folder of .bin/.idx pairs, or of MosaicML shards, as a Hugging Face Hub dataset repo.

    python hub_upload.py DIR --repo-id NAMESPACE/NAME [--private] [--revision BRANCH]
                         [--commit-message TEXT] [--dry-run]

The same as `mmidx upload`: checks every pair (or every MosaicML stream and shard), writes the
dataset card, creates the repo if needed and uploads through huggingface_hub
(mmidx_builder/publishing/hub.py does the work).
"""

import sys

from mmidx_builder.cli import main

if __name__ == "__main__":
    sys.exit(main(["upload", *sys.argv[1:]]))
