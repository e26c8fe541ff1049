"""The FastCar accelerator's blocks, in the order data flows through them.

Rows enter with their TAS operands: ``tas_unit`` / ``tas_group`` decide replay, ``replay_cache`` holds
the previous frame's MLP outputs, ``dispatcher`` hands computed rows' hidden chunks to free cores
(v1: ``mlp_core`` on ``gemm_tile`` / ``systolic_array`` / ``pe``, then ``reducer`` and ``requant``;
v2: ``mlp_engine`` with ``mv_core`` / ``mv_unit`` on one ``weight_store``, then ``row_out``), and
results leave in order. ``accelerator`` (v1) and ``accelerator_v2`` wire the pieces together;
``top`` is what ``nox -s synth`` builds.
"""
