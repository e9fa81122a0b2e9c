// `convkit filter`: classic 3x3 image kernels, each applied to every colour channel as ONE depthwise
// convolution through convkit::conv2d (groups = channels, pad 1), written as PNGs plus a labelled contact sheet.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "commands.hpp"
#include "common.hpp"
#include "image.hpp"

#ifdef CONVKIT_HAVE_STB
#include "stb_easy_font.h"
#include "stb_image.h"
#include "stb_image_write.h"
#endif

namespace convkit::cli {
namespace {

struct Kernel {
  const char* name;
  float taps[9];
  float scale;
  bool magnitude;  // edge detectors: |response|; the others are clamped as they are
};

const Kernel kKernels[] = {
    {"sobel-x", {-1, 0, 1, -2, 0, 2, -1, 0, 1}, 1.0f, true},
    {"sobel-y", {-1, -2, -1, 0, 0, 0, 1, 2, 1}, 1.0f, true},
    {"laplacian", {0, 1, 0, 1, -4, 1, 0, 1, 0}, 1.0f, true},
    {"gaussian", {1, 2, 1, 2, 4, 2, 1, 2, 1}, 1.0f / 16.0f, false},
    {"sharpen", {0, -1, 0, -1, 5, -1, 0, -1, 0}, 1.0f, false},
    {"emboss", {-2, -1, 0, -1, 1, 1, 0, 1, 2}, 1.0f, false},
};

std::vector<const Kernel*> pick_kernels(const std::string& spec) {
  std::vector<const Kernel*> out;
  if (spec == "all") {
    for (const Kernel& k : kKernels) out.push_back(&k);
    return out;
  }
  for (const auto& name : split(spec, ',')) {
    const Kernel* found = nullptr;
    for (const Kernel& k : kKernels)
      if (name == k.name) found = &k;
    if (!found)
      throw UsageError("--kernel: unknown kernel '" + name +
                       "' (expected sobel-x, sobel-y, laplacian, gaussian, sharpen, emboss or all)");
    if (std::find(out.begin(), out.end(), found) == out.end()) out.push_back(found);
  }
  if (out.empty()) throw UsageError("--kernel: no kernel named");
  return out;
}

#ifdef CONVKIT_HAVE_STB

// An 8-bit interleaved image.
void write_png(const std::string& path, const Image& im) {
  if (!stbi_write_png(path.c_str(), im.w, im.h, im.c, im.px.data(), im.w * im.c))
    throw Error(StatusCode::io_error, "cannot write '" + path + "'");
}

// One depthwise 3x3 convolution over all channels at once: [1,C,H,W] planar floats in 0..255.
std::vector<float> convolve(const Kernel& k, const std::vector<float>& planar, int C, int H, int W, Device dev,
                            std::string* algo) {
  Conv2dProblem p;
  p.n = 1, p.c = C, p.h = H, p.w = W, p.k = C, p.r = 3, p.s = 3, p.pad_h = 1, p.pad_w = 1, p.groups = C;
  std::vector<float> wei(size_t(C) * 9), out(planar.size());
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < 9; ++i) wei[size_t(c) * 9 + size_t(i)] = k.taps[i] * k.scale;
  *algo = select(p, ConvConfig{DType::f32, Layout::nchw, dev, MathMode::strict}).name();
  if (dev == Device::cpu) {
    conv2d(p, {const_cast<float*>(planar.data()), DType::f32, Layout::nchw, dev, input_dims(p)},
           {wei.data(), DType::f32, Layout::nchw, dev, weight_dims(p)},
           {out.data(), DType::f32, Layout::nchw, dev, output_dims(p)});
    return out;
  }
  Buffer x(dev, planar.size() * 4), w(dev, wei.size() * 4), y(dev, out.size() * 4);
  x.copy_from_host(planar.data(), planar.size() * 4);
  w.copy_from_host(wei.data(), wei.size() * 4);
  conv2d(p, {x.data(), DType::f32, Layout::nchw, dev, input_dims(p)},
         {w.data(), DType::f32, Layout::nchw, dev, weight_dims(p)},
         {y.data(), DType::f32, Layout::nchw, dev, output_dims(p)});
  device_synchronize(dev);
  y.copy_to_host(out.data(), out.size() * 4);
  return out;
}

// Planar floats -> interleaved 8-bit, |v| for edge kernels, clamped to 0..255.
Image to_image(const std::vector<float>& planar, int C, int H, int W, bool magnitude) {
  Image im{W, H, C, std::vector<unsigned char>(planar.size())};
  for (int c = 0; c < C; ++c)
    for (size_t i = 0; i < size_t(H) * size_t(W); ++i) {
      float v = planar[size_t(c) * size_t(H) * size_t(W) + i];
      if (magnitude) v = std::fabs(v);
      im.px[i * size_t(C) + size_t(c)] = static_cast<unsigned char>(std::lround(std::clamp(v, 0.0f, 255.0f)));
    }
  return im;
}

// Draws `text` with stb_easy_font's segment quads, each font unit `scale` pixels, top-left at (x, y).
void draw_text(Image& im, int x, int y, const std::string& text, int scale) {
  std::vector<char> buf(text.size() * 300 + 64);
  std::string t = text;
  const int quads = stb_easy_font_print(0, 0, t.data(), nullptr, buf.data(), int(buf.size()));
  for (int q = 0; q < quads; ++q) {
    float x0 = 1e9f, y0 = 1e9f, x1 = -1e9f, y1 = -1e9f;
    for (int v = 0; v < 4; ++v) {
      const float* f = reinterpret_cast<const float*>(buf.data() + (q * 4 + v) * 16);
      x0 = std::min(x0, f[0]), x1 = std::max(x1, f[0]), y0 = std::min(y0, f[1]), y1 = std::max(y1, f[1]);
    }
    for (int py = y + int(y0 * scale); py < y + int(y1 * scale); ++py)
      for (int px = x + int(x0 * scale); px < x + int(x1 * scale); ++px) {
        if (px < 0 || py < 0 || px >= im.w || py >= im.h) continue;
        for (int c = 0; c < im.c; ++c) im.px[(size_t(py) * size_t(im.w) + size_t(px)) * size_t(im.c) + size_t(c)] = 255;
      }
  }
}

// Original + results in a grid (at most 4 across), each tile under a band with its label.
Image contact_sheet(const std::vector<std::pair<std::string, Image>>& tiles) {
  const int n = int(tiles.size()), cols = std::min(n, 4), rows = (n + cols - 1) / cols;
  const int src_w = tiles[0].second.w, src_h = tiles[0].second.h;
  const int step = std::max(1, (std::max(src_w, src_h) + 511) / 512);  // tiles at most 512 px
  const int tw = (src_w + step - 1) / step, th = (src_h + step - 1) / step;
  const int scale = std::max(2, tw / 160), band = 12 * scale, gap = 8;
  auto text_width = [&](const std::string& s) { return stb_easy_font_width(const_cast<char*>(s.c_str())) * scale; };
  int slot = tw;  // a small image still gets room for its label
  for (const auto& t : tiles) slot = std::max(slot, text_width(t.first) + 2 * scale);
  Image sheet{gap + cols * (slot + gap), gap + rows * (band + th + gap), 3, {}};
  sheet.px.assign(size_t(sheet.w) * size_t(sheet.h) * 3, 40);
  for (int i = 0; i < n; ++i) {
    const Image& im = tiles[size_t(i)].second;
    const int sx = gap + (i % cols) * (slot + gap), ox = sx + (slot - tw) / 2, oy = gap + (i / cols) * (band + th + gap);
    draw_text(sheet, sx + (slot - text_width(tiles[size_t(i)].first)) / 2, oy + 3 * scale, tiles[size_t(i)].first,
              scale);
    for (int y = 0; y < th; ++y)
      for (int x = 0; x < tw; ++x) {
        const size_t s = (size_t(y * step) * size_t(im.w) + size_t(x * step)) * size_t(im.c);
        const size_t d = (size_t(oy + band + y) * size_t(sheet.w) + size_t(ox + x)) * 3;
        for (int c = 0; c < 3; ++c) sheet.px[d + size_t(c)] = im.px[s + size_t(im.c >= 3 ? c : 0)];
      }
  }
  return sheet;
}

#endif  // CONVKIT_HAVE_STB

}  // namespace

CLI::App* add_filter(CLI::App& app, FilterOptions& o) {
  CLI::App* sub = app.add_subcommand("filter", "Apply classic 3x3 image kernels (one depthwise convolution each) "
                                               "and write PNGs plus a labelled contact sheet.");
  sub->add_option("image", o.image, "a PNG or BMP image (default: assets/astronaut.png of the source tree)");
  sub->add_option("--kernel", o.kernels, "sobel-x,sobel-y,laplacian,gaussian,sharpen,emboss or all")
      ->capture_default_str();
  sub->add_option("--out", o.out, "output folder (created if missing)")->capture_default_str();
  sub->add_option("--device", o.device, "cpu|cuda|auto")->capture_default_str();
  return sub;
}

int run_filter(const FilterOptions& o) {
#ifndef CONVKIT_HAVE_STB
  (void)o;
  (void)pick_kernels;
  throw UsageError("`convkit filter` is unavailable: this convkit was built without stb (stb_image.h was not found "
                   "when it was configured; apt-get install libstb-dev and reconfigure)");
#else
  const auto kernels = pick_kernels(o.kernels);
  const Device dev = resolve_device(o.device);
  std::string path = o.image;
  if (path.empty()) {
    path = source_dir() + "/assets/astronaut.png";
    if (source_dir().empty() || !file_exists(path))
      throw UsageError("no IMAGE given and the default image " + path + " does not exist");
  }
  if (!file_exists(path)) throw UsageError("image '" + path + "' does not exist");
  const Image original = read_image(path);
  const int w = original.w, h = original.h, C = original.c;

  std::vector<float> planar(original.px.size());
  for (int c = 0; c < C; ++c)
    for (size_t i = 0; i < size_t(w) * size_t(h); ++i)
      planar[size_t(c) * size_t(w) * size_t(h) + i] = original.px[i * size_t(C) + size_t(c)];

  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw UsageError("cannot create the output folder '" + o.out + "': " + ec.message());

  std::vector<std::pair<std::string, Image>> tiles{{"original", original}};
  for (const Kernel* k : kernels) {
    std::string algo;
    const auto out = convolve(*k, planar, C, h, w, dev, &algo);
    Image im = to_image(out, C, h, w, k->magnitude);
    const std::string file = o.out + "/" + k->name + ".png";
    write_png(file, im);
    fmt::print("{:<10} -> {}  ({} on {}, {}x{}x{}, groups {})\n", k->name, file, algo, to_string(dev), C, h, w, C);
    tiles.emplace_back(k->name, std::move(im));
  }
  const std::string sheet = o.out + "/contact_sheet.png";
  write_png(sheet, contact_sheet(tiles));
  fmt::print("contact sheet -> {}\n", sheet);
  return 0;
#endif
}

}  // namespace convkit::cli
