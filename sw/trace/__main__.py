"""``python -m sw.trace DIR``: validate a trace directory (:func:`sw.trace.check.main`)."""

import sys

from sw.trace.check import main

sys.exit(main())
