"""Property wrappers for formal verification (``tb/formal.py`` runs them through SymbiYosys).

Each wrapper instantiates one block, constrains its inputs with ``Assume``, checks its outputs
with ``Assert`` and marks the behaviour it must be able to reach with ``Cover``:

- ``harness``: clock, free inputs, previous-cycle registers, the stream rule, internal registers;
- ``handshake``: the stream rule on every output of a block;
- ``dispatcher``, ``reorder_buffer``, ``replay_cache``: scoreboards;
- ``accelerator``: the host's group contract on the top level;
- ``properties``: the list that ``tests/formal`` runs.

``docs/verification.md`` lists the properties, their depths and which are proven by induction.
"""
