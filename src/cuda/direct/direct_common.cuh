// Pieces shared by the CUDA direct-convolution ladder (v1_naive, v2_smem_tiled, v3_regblock): the geometry of
// a staged input tile (the problem's sizes, ConvDims, are in cuda/common/geometry.cuh).
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include "convkit/algorithm.hpp"
#include "cuda/common/geometry.cuh"

namespace convkit::detail {

// Geometry of one staged input tile (one channel, one image) that feeds tile_p x tile_q outputs.
//
// Columns are stored "phase-split" by the horizontal stride u: input column x of the tile goes to
//   (x % u) * wp + x / u,   wp = ceil(iw / u),
// so the columns that neighbouring outputs q, q+1 read for one filter tap, x = q*u + s*d, are adjacent
// words whatever u is: a strided tile reads like a stride-1 tile. Rows are not split; consecutive output
// rows are u rows (u*ld words) apart.
struct TileGeom {
  int64_t ih = 0, iw = 0;  // input rows / columns the tile needs (halo included)
  int64_t wp = 0;          // words per stride phase of a row
  int64_t ld = 0;          // row pitch in words (>= u*wp, padded: see pitch_for())
};

// NOTE: the pitch is padded so that (stride_h * ld) % 32 == 16. Both kernels that use it have half-warps
// of 16 lanes reading 16 adjacent words of one output row (adjacent after the phase split, for any stride),
// and the other half-warp reading the same 16 columns one OUTPUT row further down, i.e. stride_h input rows
// = stride_h*ld words further. With stride_h*ld = 16 (mod 32) the second half lands exactly on the 16 banks
// the first half does not use: conflict-free. Stride 1: ld = 16 (mod 32), e.g. 18 columns -> ld 48.
// Stride 2: 2*ld = 16 (mod 32) <=> ld = 8 (mod 16), e.g. 37 columns (19 per phase, 38 words) -> ld 40.
// Strides divisible by 32 have no such pitch; they keep the unpadded one (and some bank conflicts).
// `align`: the pitch must also be a multiple of it (4 where rows are written with float4 stores).
inline int64_t pitch_for(int64_t row_words, int64_t stride_h, int64_t align = 1) {
  const int64_t first = (row_words + align - 1) / align * align;
  for (int64_t ld = first; ld < first + 32 * align; ld += align)
    if ((stride_h * ld) % 32 == 16) return ld;
  return first;
}

inline TileGeom tile_geom(const Conv2dProblem& pb, int64_t tile_p, int64_t tile_q) {
  TileGeom g;
  g.ih = (tile_p - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1;
  g.iw = (tile_q - 1) * pb.stride_w + (pb.s - 1) * pb.dilation_w + 1;
  g.wp = (g.iw + pb.stride_w - 1) / pb.stride_w;
  g.ld = pitch_for(pb.stride_w * g.wp, pb.stride_h);
  return g;
}

}  // namespace convkit::detail
