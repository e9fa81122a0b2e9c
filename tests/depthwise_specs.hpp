// The depthwise shapes the GPU depthwise tests share (test_depthwise.cpp: the forward kernels,
// test_backward.cpp: the gradient kernels): filters 1x1 to 31x31, multipliers 1 to 4, stride 2 on odd sizes,
// stride 3, dilation 2, padding past R/2, channel counts off the vector width (3, 17, 145), batch 1, 1x1 and
// 1xW images.
#pragma once

namespace ckt {

inline constexpr const char* kDepthwiseSpecs[] = {
    "n2c32h17w19k32r3s3p1g32",       "n1c144h14w14k144r3s3p1u2g144", "n2c17h9w13k17r5s5p2g17",
    "n1c3h11w7k3r7s7p3g3",           "n1c145h9w9k145r3s3p1g145",     "n2c16h12w12k16r3s3p4d2g16",
    "n1c8h40w40k8r31s31p15g8",       "n1c16h1w1k16r3s3p1g16",        "n2c24h1w37k24r1s5ph0pw2g24",
    "n1c16h15w15k32r3s3p1g16",       "n1c8h13w11k32r3s3p1u2g8",      "n1c9h10w10k27r5s5p2g9",
    "n3c64h23w29k64r1s1g64",         "n1c40h21w21k40r7s7p3u2d2g40",  "n1c96h28w28k96r7s7p3g96",
    "n1c16h8w8k16r3s3p0u3g16",       "n2c48h31w5k48r3s1p1g48",       "n1c8h19w19k8r11s11p5d2g8",
    // the rows kernel: a ring that wraps (one block walks the whole image), blocks that split the image
    // (several steps each), stride 2 with 5x5 on odd sizes, dilation along H, R != S, f32's 4-channel path
    "n2c32h70w23k32r3s3p1g32",       "n64c64h128w16k64r3s3p1g64",    "n2c48h33w31k48r5s5p2u2g48",
    "n1c32h21w20k32r3s3p2dh2g32",    "n1c24h13w9k24r7s3ph3pw1g24",   "n2c20h17w19k20r3s3p1g20",
    // the column kernel: padding past R/2 at 3x3 and 5x5, 5x5 stride 2 on odd sizes with 8 channels
    "n2c16h9w11k16r3s3p2g16",        "n2c24h15w13k24r5s5p3g24",      "n1c8h7w9k8r5s5p3u2g8",
    // the tensor-core kernel: a width past its widest tile (Q = 75 in tiles of 25), dilation along W
    "n1c16h10w75k16r3s3p2dw2g16",
    // the TMA kernel: channel chunks of which the last is partly past C (144 = 64 + 64 + 16 in 16-bit types,
    // 200 with 5x5), 7x7 stride 2 on odd sizes, padding past the filter (windows wholly in the padding),
    // more tiles than the grid has blocks (each block's stages wrap)
    "n3c144h30w30k144r3s3p1g144",    "n2c200h19w17k200r5s5p2g200",   "n2c72h23w29k72r7s7p3u2g72",
    "n1c32h6w7k32r3s3p4g32",         "n16c64h64w64k64r3s3p1g64",
    // the TMA kernel's whole pixels (/px): C in two parts of 240, thread groups that straddle warps (96 at
    // stride 2 on odd sizes; 24 channels: groups of 12 threads)
    "n2c480h11w13k480r3s3p1g480",    "n2c96h25w27k96r3s3p1u2g96",    "n1c24h33w35k24r5s5p2g24"};

}  // namespace ckt
