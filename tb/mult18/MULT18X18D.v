// Simulation model of the ECP5 MULT18X18D multiplier, for the subset of its settings that
// hw/lib/mult18.py uses: REG_INPUTA/B, REG_PIPELINE and REG_OUTPUT each either "NONE" or "CLK0"
// (clock enable CE0, synchronous reset RST0), SOURCEA/B = 0 (parallel inputs), SIGNEDA/B
// selecting two's complement operands. Written from the ECP5 sysDSP user guide (FPGA-TN-02205):
// P = A * B, registered at the input, pipeline and output stages that are enabled.
// Any other setting stops the simulation at time 0.
`default_nettype none
module MULT18X18D(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17, C0, C1, C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13, C14, C15, C16, C17, SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK0, CLK1, CLK2, CLK3, CE0, CE1, CE2, CE3, RST0, RST1, RST2, RST3, P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16, P17, P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33, P34, P35);
  parameter REG_INPUTA_CLK = "NONE";
  parameter REG_INPUTB_CLK = "NONE";
  parameter REG_INPUTC_CLK = "NONE";
  parameter REG_PIPELINE_CLK = "NONE";
  parameter REG_OUTPUT_CLK = "NONE";
  parameter REG_INPUTA_CE = "CE0";
  parameter REG_INPUTB_CE = "CE0";
  parameter REG_INPUTC_CE = "CE0";
  parameter REG_PIPELINE_CE = "CE0";
  parameter REG_OUTPUT_CE = "CE0";
  parameter REG_INPUTA_RST = "RST0";
  parameter REG_INPUTB_RST = "RST0";
  parameter REG_INPUTC_RST = "RST0";
  parameter REG_PIPELINE_RST = "RST0";
  parameter REG_OUTPUT_RST = "RST0";
  parameter CLK0_DIV = "ENABLED";
  parameter CLK1_DIV = "ENABLED";
  parameter CLK2_DIV = "ENABLED";
  parameter CLK3_DIV = "ENABLED";
  parameter HIGHSPEED_CLK = "NONE";
  parameter GSR = "ENABLED";
  parameter CAS_MATCH_REG = "FALSE";
  parameter SOURCEB_MODE = "B_SHIFT";
  parameter MULT_BYPASS = "DISABLED";
  parameter RESETMODE = "SYNC";
  input wire A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17, C0, C1, C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13, C14, C15, C16, C17, SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK0, CLK1, CLK2, CLK3, CE0, CE1, CE2, CE3, RST0, RST1, RST2, RST3;
  output wire P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16, P17, P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33, P34, P35;
  wire [17:0] a_in = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
  wire [17:0] b_in = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
  initial begin
    if ((REG_INPUTA_CLK != "NONE" && REG_INPUTA_CLK != "CLK0") ||
        (REG_INPUTB_CLK != "NONE" && REG_INPUTB_CLK != "CLK0") ||
        (REG_PIPELINE_CLK != "NONE" && REG_PIPELINE_CLK != "CLK0") ||
        (REG_OUTPUT_CLK != "NONE" && REG_OUTPUT_CLK != "CLK0") ||
        REG_INPUTA_CE != "CE0" || REG_INPUTB_CE != "CE0" || REG_PIPELINE_CE != "CE0" ||
        REG_OUTPUT_CE != "CE0" || RESETMODE != "SYNC" || MULT_BYPASS != "DISABLED") begin
      $display("MULT18X18D model: unsupported parameter setting");
      $finish;
    end
  end
  reg [17:0] a_r = 18'd0, b_r = 18'd0;
  reg sa_r = 1'b0, sb_r = 1'b0;
  always @(posedge CLK0) if (RST0) begin a_r <= 18'd0; sa_r <= 1'b0; end
                         else if (CE0) begin a_r <= a_in; sa_r <= SIGNEDA; end
  always @(posedge CLK0) if (RST0) begin b_r <= 18'd0; sb_r <= 1'b0; end
                         else if (CE0) begin b_r <= b_in; sb_r <= SIGNEDB; end
  wire [17:0] a = (REG_INPUTA_CLK == "CLK0") ? a_r : a_in;
  wire sa = (REG_INPUTA_CLK == "CLK0") ? sa_r : SIGNEDA;
  wire [17:0] b = (REG_INPUTB_CLK == "CLK0") ? b_r : b_in;
  wire sb = (REG_INPUTB_CLK == "CLK0") ? sb_r : SIGNEDB;
  // Operands extended to 36 bits by their own signedness; the low 36 bits of the product.
  wire [35:0] a_x = {{18{sa & a[17]}}, a};
  wire [35:0] b_x = {{18{sb & b[17]}}, b};
  wire [35:0] prod = a_x * b_x;
  reg [35:0] pipe_r = 36'd0, out_r = 36'd0;
  always @(posedge CLK0) if (RST0) pipe_r <= 36'd0; else if (CE0) pipe_r <= prod;
  wire [35:0] piped = (REG_PIPELINE_CLK == "CLK0") ? pipe_r : prod;
  always @(posedge CLK0) if (RST0) out_r <= 36'd0; else if (CE0) out_r <= piped;
  wire [35:0] p = (REG_OUTPUT_CLK == "CLK0") ? out_r : piped;
  assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = p;
endmodule
`default_nettype wire
