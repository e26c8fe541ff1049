"""The implementation flow: synthesis to an ECP5-85F bitstream (``synth``), per-block timing
(``timing``, in a ``synth_harness``), and the analyses of a placed design (``congestion``, ``fanout``)."""
