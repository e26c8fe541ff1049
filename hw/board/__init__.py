"""The ULX3S-85F board: PLL clock, UART and its command bridge around the accelerator (``top``,
``core``, ``clock``, ``uart_*``), the host's packing of a trace into words and beats (``host``),
and the host program that runs a trace on a real board (``python -m hw.board.run``)."""
