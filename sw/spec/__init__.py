"""The bit-exact contract, written once: requantisation, SwiGLU, TAS, the replay decision, the
sampler's arithmetic (:mod:`sw.spec.quant`, documented in ``docs/quantization.md``).

This package sits at the bottom of the project: it needs only numpy and imports nothing of the
project, so the float model, the integer golden model, the traces and the gateware all read one
copy of every rule.
"""
