"""Stream and FPGA primitives that know nothing of FastCar: block RAM, DSP multiplier, clock-network
buffer, register slice, packet arbiter, reorder buffer, shared tables, AXI4-Stream ports, bit widths."""
