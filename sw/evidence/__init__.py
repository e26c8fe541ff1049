"""Evidence on the shipped model: the report of the paper's claims, the tau sweep, the CPU
decode-speed benchmark and the reproducibility margin of the trace export."""
