"""``python -m sw.trace DIR``: validate a trace directory (:func:`sw.trace.store.main`)."""

import sys

from sw.trace.store import main

sys.exit(main())
