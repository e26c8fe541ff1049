// Simulation model of the ECP5 DP16KD block RAM, for the subset of its settings that hw/lib/bram.py
// uses. Yosys's cells_sim.v only declares DP16KD as a black box, so the equivalence test of
// tb/bram needs this. Written from the ECP5 memory usage guide (TN1264 / FPGA-TN-02204):
// - each port registers AD, DI and WE at its clock edge when CE is high and the port is selected
//   (CS2..0 equal to CSDECODE); a read puts the addressed word into the port's read latch, which
//   holds while CE is low; WRITEMODE says what the read latch of a writing port gets: NORMAL
//   keeps it, WRITETHROUGH the new word, READBEFOREWRITE the old one;
// - REGMODE "OUTREG" adds the output register, loaded from the read latch when OCE is high;
//   "NOREG" drives DO from the read latch;
// - DATA_WIDTH 1, 2, 4, 9 or 18 (36 is pseudo-dual-port only and not modelled): the word address
//   is AD13..4, AD13..3, AD13..2, AD13..1 or AD13..0 from the widest down; at width 18, AD1..0 are
//   the byte enables of a write (DI8..0 and DI17..9);
// - INITVAL_00..3F hold the 1,024 rows of 18 bits, 16 rows per parameter, each row in 20 bits
//   (18 data bits, then 2 pad bits). A row is two 9-bit halves, the lower address in the lower
//   half; at widths 1, 2 and 4 a half holds 8 data bits, lower addresses in lower bits, and its
//   ninth bit is unused (the layout of Yosys's ECP5 block-RAM mapping, passes/memory/memlib.md).
// - A read of a word that the other port writes at the same clock edge is a collision: the read
//   latch gets X (the block gives no guarantee). Detected when both ports run on one clock.
// Registers start at 0. RST must stay low (no reset modelled), and only CSDECODE "0b000" is
// supported. Any other setting stops the simulation.
`default_nettype none
module DP16KD(DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0, ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0, CEA, OCEA, CLKA, WEA, RSTA, CSA2, CSA1, CSA0, DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0, ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0, CEB, OCEB, CLKB, WEB, RSTB, CSB2, CSB1, CSB0,
              DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0, DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0);
  parameter DATA_WIDTH_A = 18;
  parameter DATA_WIDTH_B = 18;
  parameter REGMODE_A = "NOREG";
  parameter REGMODE_B = "NOREG";
  parameter RESETMODE = "SYNC";
  parameter ASYNC_RESET_RELEASE = "SYNC";
  parameter CSDECODE_A = "0b000";
  parameter CSDECODE_B = "0b000";
  parameter WRITEMODE_A = "NORMAL";
  parameter WRITEMODE_B = "NORMAL";
  parameter GSR = "ENABLED";
  parameter INIT_DATA = "STATIC";
  parameter [319:0] INITVAL_00 = 320'h0;
  parameter [319:0] INITVAL_01 = 320'h0;
  parameter [319:0] INITVAL_02 = 320'h0;
  parameter [319:0] INITVAL_03 = 320'h0;
  parameter [319:0] INITVAL_04 = 320'h0;
  parameter [319:0] INITVAL_05 = 320'h0;
  parameter [319:0] INITVAL_06 = 320'h0;
  parameter [319:0] INITVAL_07 = 320'h0;
  parameter [319:0] INITVAL_08 = 320'h0;
  parameter [319:0] INITVAL_09 = 320'h0;
  parameter [319:0] INITVAL_0A = 320'h0;
  parameter [319:0] INITVAL_0B = 320'h0;
  parameter [319:0] INITVAL_0C = 320'h0;
  parameter [319:0] INITVAL_0D = 320'h0;
  parameter [319:0] INITVAL_0E = 320'h0;
  parameter [319:0] INITVAL_0F = 320'h0;
  parameter [319:0] INITVAL_10 = 320'h0;
  parameter [319:0] INITVAL_11 = 320'h0;
  parameter [319:0] INITVAL_12 = 320'h0;
  parameter [319:0] INITVAL_13 = 320'h0;
  parameter [319:0] INITVAL_14 = 320'h0;
  parameter [319:0] INITVAL_15 = 320'h0;
  parameter [319:0] INITVAL_16 = 320'h0;
  parameter [319:0] INITVAL_17 = 320'h0;
  parameter [319:0] INITVAL_18 = 320'h0;
  parameter [319:0] INITVAL_19 = 320'h0;
  parameter [319:0] INITVAL_1A = 320'h0;
  parameter [319:0] INITVAL_1B = 320'h0;
  parameter [319:0] INITVAL_1C = 320'h0;
  parameter [319:0] INITVAL_1D = 320'h0;
  parameter [319:0] INITVAL_1E = 320'h0;
  parameter [319:0] INITVAL_1F = 320'h0;
  parameter [319:0] INITVAL_20 = 320'h0;
  parameter [319:0] INITVAL_21 = 320'h0;
  parameter [319:0] INITVAL_22 = 320'h0;
  parameter [319:0] INITVAL_23 = 320'h0;
  parameter [319:0] INITVAL_24 = 320'h0;
  parameter [319:0] INITVAL_25 = 320'h0;
  parameter [319:0] INITVAL_26 = 320'h0;
  parameter [319:0] INITVAL_27 = 320'h0;
  parameter [319:0] INITVAL_28 = 320'h0;
  parameter [319:0] INITVAL_29 = 320'h0;
  parameter [319:0] INITVAL_2A = 320'h0;
  parameter [319:0] INITVAL_2B = 320'h0;
  parameter [319:0] INITVAL_2C = 320'h0;
  parameter [319:0] INITVAL_2D = 320'h0;
  parameter [319:0] INITVAL_2E = 320'h0;
  parameter [319:0] INITVAL_2F = 320'h0;
  parameter [319:0] INITVAL_30 = 320'h0;
  parameter [319:0] INITVAL_31 = 320'h0;
  parameter [319:0] INITVAL_32 = 320'h0;
  parameter [319:0] INITVAL_33 = 320'h0;
  parameter [319:0] INITVAL_34 = 320'h0;
  parameter [319:0] INITVAL_35 = 320'h0;
  parameter [319:0] INITVAL_36 = 320'h0;
  parameter [319:0] INITVAL_37 = 320'h0;
  parameter [319:0] INITVAL_38 = 320'h0;
  parameter [319:0] INITVAL_39 = 320'h0;
  parameter [319:0] INITVAL_3A = 320'h0;
  parameter [319:0] INITVAL_3B = 320'h0;
  parameter [319:0] INITVAL_3C = 320'h0;
  parameter [319:0] INITVAL_3D = 320'h0;
  parameter [319:0] INITVAL_3E = 320'h0;
  parameter [319:0] INITVAL_3F = 320'h0;
  input wire DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0, ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0, CEA, OCEA, CLKA, WEA, RSTA, CSA2, CSA1, CSA0, DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0, ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0, CEB, OCEB, CLKB, WEB, RSTB, CSB2, CSB1, CSB0;
  output wire DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0, DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0;

  wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
  wire [17:0] dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
  wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0};
  wire [13:0] adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
  wire sel_a = {CSA2, CSA1, CSA0} == 3'b000;
  wire sel_b = {CSB2, CSB1, CSB0} == 3'b000;

  function automatic integer valid_width(input integer w);
    valid_width = (w == 1 || w == 2 || w == 4 || w == 9 || w == 18);
  endfunction
  initial begin
    if (!valid_width(DATA_WIDTH_A) || !valid_width(DATA_WIDTH_B) ||
        (REGMODE_A != "NOREG" && REGMODE_A != "OUTREG") ||
        (REGMODE_B != "NOREG" && REGMODE_B != "OUTREG") ||
        (WRITEMODE_A != "NORMAL" && WRITEMODE_A != "WRITETHROUGH" && WRITEMODE_A != "READBEFOREWRITE") ||
        (WRITEMODE_B != "NORMAL" && WRITEMODE_B != "WRITETHROUGH" && WRITEMODE_B != "READBEFOREWRITE") ||
        CSDECODE_A != "0b000" || CSDECODE_B != "0b000" || RESETMODE != "SYNC") begin
      $display("DP16KD model: unsupported parameter setting");
      $finish;
    end
  end

  // The 1,024 rows of 18 bits, filled from INITVAL_00..3F.
  localparam [20479:0] INIT = {
    INITVAL_3F, INITVAL_3E, INITVAL_3D, INITVAL_3C, INITVAL_3B, INITVAL_3A, INITVAL_39, INITVAL_38,
    INITVAL_37, INITVAL_36, INITVAL_35, INITVAL_34, INITVAL_33, INITVAL_32, INITVAL_31, INITVAL_30,
    INITVAL_2F, INITVAL_2E, INITVAL_2D, INITVAL_2C, INITVAL_2B, INITVAL_2A, INITVAL_29, INITVAL_28,
    INITVAL_27, INITVAL_26, INITVAL_25, INITVAL_24, INITVAL_23, INITVAL_22, INITVAL_21, INITVAL_20,
    INITVAL_1F, INITVAL_1E, INITVAL_1D, INITVAL_1C, INITVAL_1B, INITVAL_1A, INITVAL_19, INITVAL_18,
    INITVAL_17, INITVAL_16, INITVAL_15, INITVAL_14, INITVAL_13, INITVAL_12, INITVAL_11, INITVAL_10,
    INITVAL_0F, INITVAL_0E, INITVAL_0D, INITVAL_0C, INITVAL_0B, INITVAL_0A, INITVAL_09, INITVAL_08,
    INITVAL_07, INITVAL_06, INITVAL_05, INITVAL_04, INITVAL_03, INITVAL_02, INITVAL_01, INITVAL_00
  };
  reg [17:0] rows [0:1023];
  integer r;
  initial for (r = 0; r < 1024; r = r + 1) rows[r] = INIT[r * 20 +: 18];

  // Bit offset of the addressed word in its row (AD13..4), for a port of width w.
  function automatic [4:0] offset(input integer w, input [13:0] ad);
    case (w)
      9: offset = ad[3] * 9;
      4: offset = ad[3] * 9 + ad[2] * 4;
      2: offset = ad[3] * 9 + ad[2:1] * 2;
      1: offset = ad[3] * 9 + ad[2:0];
      default: offset = 0;
    endcase
  endfunction
  // The bits of the row a port reads (we = 0) or writes (we = 1).
  function automatic [17:0] bits(input integer w, input [13:0] ad, input we);
    if (w == 18)
      bits = we ? {{9{ad[1]}}, {9{ad[0]}}} : 18'h3ffff;
    else
      bits = ((18'd1 << w) - 18'd1) << offset(w, ad);
  endfunction

  wire wr_a = CEA && sel_a && WEA, wr_b = CEB && sel_b && WEB;
  wire [17:0] bits_a = bits(DATA_WIDTH_A, ada, WEA), bits_b = bits(DATA_WIDTH_B, adb, WEB);
  wire [17:0] din_a = dia << offset(DATA_WIDTH_A, ada), din_b = dib << offset(DATA_WIDTH_B, adb);
  wire [17:0] row_a = rows[ada[13:4]], row_b = rows[adb[13:4]];
  wire [17:0] new_a = (row_a & ~bits_a) | (din_a & bits_a), new_b = (row_b & ~bits_b) | (din_b & bits_b);
  // Both ports on one clock edge touching common bits of one row, at least one of them writing.
  wire same_edge = CLKA === CLKB;
  wire collide = same_edge && CEA && sel_a && CEB && sel_b && ada[13:4] == adb[13:4] &&
                 (bits_a & bits_b) != 18'd0 && (WEA || WEB);

  reg [17:0] latch_a = 18'd0, latch_b = 18'd0, out_a = 18'd0, out_b = 18'd0;
  always @(posedge CLKA) begin
    if (RSTA !== 1'b0) begin
      $display("DP16KD model: RSTA must stay low");
      $finish;
    end
    if (CEA && sel_a) begin
      if (WEA) begin
        rows[ada[13:4]] <= new_a;
        if (WRITEMODE_A == "WRITETHROUGH") latch_a <= new_a >> offset(DATA_WIDTH_A, ada);
        else if (WRITEMODE_A == "READBEFOREWRITE") latch_a <= row_a >> offset(DATA_WIDTH_A, ada);
      end else
        latch_a <= collide ? 18'bx : row_a >> offset(DATA_WIDTH_A, ada);
    end
    if (OCEA) out_a <= latch_a;
  end
  always @(posedge CLKB) begin
    if (RSTB !== 1'b0) begin
      $display("DP16KD model: RSTB must stay low");
      $finish;
    end
    if (CEB && sel_b) begin
      if (WEB) begin
        rows[adb[13:4]] <= new_b;
        if (WRITEMODE_B == "WRITETHROUGH") latch_b <= new_b >> offset(DATA_WIDTH_B, adb);
        else if (WRITEMODE_B == "READBEFOREWRITE") latch_b <= row_b >> offset(DATA_WIDTH_B, adb);
      end else
        latch_b <= collide ? 18'bx : row_b >> offset(DATA_WIDTH_B, adb);
    end
    if (OCEB) out_b <= latch_b;
  end

  // DO carries the word in its low DATA_WIDTH bits; the other bits are 0.
  wire [17:0] mask_a = DATA_WIDTH_A == 18 ? 18'h3ffff : (18'd1 << DATA_WIDTH_A) - 18'd1;
  wire [17:0] mask_b = DATA_WIDTH_B == 18 ? 18'h3ffff : (18'd1 << DATA_WIDTH_B) - 18'd1;
  assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = (REGMODE_A == "OUTREG" ? out_a : latch_a) & mask_a;
  assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = (REGMODE_B == "OUTREG" ? out_b : latch_b) & mask_b;
endmodule
`default_nettype wire
