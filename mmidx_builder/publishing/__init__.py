"""Publishing a corpus: its dataset card computed from the reader's own numbers (card.py; for a
folder of MosaicML shards from mosaic_facts.py) and the upload through huggingface_hub (hub.py).

May import every layer below it: the card loads the corpus the way a user would.
"""
