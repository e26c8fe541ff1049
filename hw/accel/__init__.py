"""The FastCar accelerator's blocks, in the order data flows through them.

Rows enter with their TAS operands: ``tas_group`` decides replay, ``replay_cache`` holds the previous
frame's MLP outputs, and ``mlp_engine`` computes the rest: its ``dispatcher`` hands computed rows'
hidden chunks to the ``mv_core`` s (a ``mv_unit`` each, on one ``weight_store``, with
``requant_lane`` s), and ``row_out`` adds and requantises each row. Results leave in order.
``accelerator`` wires the pieces together; ``layouts`` and ``mv_layout`` hold what the blocks and
the host share.
"""
