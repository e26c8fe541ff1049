"""The whole decode step in gateware: its blocks, one component per file (docs/decoder.md)."""
