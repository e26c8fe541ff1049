"""Property wrappers for formal verification (``tb/formal.py`` runs them through SymbiYosys).

Each wrapper instantiates one block, constrains its inputs with ``Assume``, checks its outputs
with ``Assert`` and marks the behaviour it must be able to reach with ``Cover``:

- ``harness``: clock, free inputs, previous-cycle registers, the stream rule, internal registers;
- ``handshake``: the stream rule on every output of a block;
- ``dispatcher``, ``reorder_buffer``, ``replay_cache``, ``row_out``, ``weight_store``, ``tas_group``:
  scoreboards;
- ``accelerator``: the host's group contract on the top level, with the handshake on ``y``;
- ``mv_unit``: the matrix-vector unit's adder tree and accumulators against exact sums;
- ``properties``: the list that ``tests/formal`` runs.

``docs/verification.md`` lists the properties, their depths and which are proven by induction.
"""
