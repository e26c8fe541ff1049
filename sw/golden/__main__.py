"""``python -m sw.golden``: the integer constants' command (:func:`sw.golden.calibrate.main`)."""

from sw.golden.calibrate import main

raise SystemExit(main())
