"""The kit both datapaths (the FastCar MLP engine in ``hw/accel``, the rest of the decode step in
``hw/step``) are built on, knowing nothing of FastCar: block RAM and the DSP multiplier (placed on
purpose), the MAC unit and the requantisation lane, the AXI4 read and write managers, the credited
output queue, restoring division, the payload packer, clock-network buffer, register slice, packet
arbiter, reorder buffer, shared tables, AXI4-Stream ports, bit widths."""
