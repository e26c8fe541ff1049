"""FastCar-HW gateware (Amaranth)."""
