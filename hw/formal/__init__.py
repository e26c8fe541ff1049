"""Property wrappers for formal verification (``tb/formal.py`` runs them through SymbiYosys).

Each wrapper instantiates one block, constrains its inputs with ``Assume``, checks its outputs
with ``Assert`` and marks the behaviour it must be able to reach with ``Cover``:

- ``harness``: clock, free inputs, previous-cycle registers, the stream rule, internal registers;
- ``handshake``: the stream rule on every output of a block;
- ``dispatcher``, ``reorder_buffer``, ``replay_cache``, ``packet_arbiter``: scoreboards;
- ``row_out``, ``weight_store``, ``tas_group``: scoreboards of the v2 output stage, weight store
  and TAS group;
- ``accelerator``: the host's group contract on the top level; ``accelerator_v2``: the same for
  the v2 top, with the handshake on ``y``;
- ``accumulators``: accumulator widths, written out and proven for the PE; ``mv_unit``: the v2
  matrix-vector unit's adder tree and accumulators against exact sums;
- ``properties``: the list that ``tests/formal`` runs.

``docs/verification.md`` lists the properties, their depths and which are proven by induction.
"""
