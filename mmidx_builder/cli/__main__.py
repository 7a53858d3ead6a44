"""``python -m mmidx_builder.cli``: the same as the ``mmidx`` command."""

import sys

from . import main

sys.exit(main())
