#include "npy.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>

#include "common/element.hpp"
#include "convkit/status.hpp"

namespace convkit::cli {
namespace {

const char kMagic[] = "\x93NUMPY";  // 6 bytes

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw Error(StatusCode::io_error, path + ": " + why);
}

// The header's Python dict literal: string keys; values are strings, True/False or tuples of integers.
struct HeaderValue {
  enum Kind { string, boolean, tuple } kind = string;
  std::string s;
  bool b = false;
  std::vector<int64_t> ints;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : t_(text), path_(path) {}

  std::map<std::string, HeaderValue> parse() {
    std::map<std::string, HeaderValue> out;
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      std::string key = quoted();
      expect(':');
      out[key] = value();
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}' after the value of '" + key + "'");
    }
    ++i_;
    skip();
    if (i_ != t_.size()) fail("unexpected text after the closing '}'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { bad(path_, "bad .npy header (" + why + ")"); }
  void skip() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  char peek() const { return i_ < t_.size() ? t_[i_] : '\0'; }
  void expect(char c) {
    skip();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string quoted() {
    skip();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    const size_t end = t_.find(q, i_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string s = t_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return s;
  }
  int64_t integer() {
    skip();
    const size_t start = i_;
    while (std::isdigit(static_cast<unsigned char>(peek()))) ++i_;
    if (i_ == start) fail("expected a non-negative integer in the shape");
    if (i_ - start > 18) fail("a dimension in the shape is too large");
    int64_t v = std::stoll(t_.substr(start, i_ - start));
    if (peek() == 'L') ++i_;  // Python 2 longs
    return v;
  }
  HeaderValue value() {
    skip();
    HeaderValue v;
    if (peek() == '\'' || peek() == '"') {
      v.s = quoted();
    } else if (t_.compare(i_, 4, "True") == 0) {
      v.kind = HeaderValue::boolean, v.b = true, i_ += 4;
    } else if (t_.compare(i_, 5, "False") == 0) {
      v.kind = HeaderValue::boolean, v.b = false, i_ += 5;
    } else if (peek() == '(') {
      v.kind = HeaderValue::tuple;
      ++i_;
      for (;;) {
        skip();
        if (peek() == ')') break;
        v.ints.push_back(integer());
        skip();
        if (peek() == ',') ++i_;
        else if (peek() != ')') fail("expected ',' or ')' in the shape");
      }
      ++i_;
    } else {
      fail("unexpected value");
    }
    return v;
  }

  const std::string& t_;
  const std::string& path_;
  size_t i_ = 0;
};

std::string describe_dtype(const std::string& d) {
  if (d == ">f4" || d == ">f2") return "big-endian; save with x.astype('<f4')";
  if (d == "<f8") return "float64; convert with x.astype(np.float32)";
  if (d == "<V2" || d == "|V2") return "raw 2-byte values (bfloat16?): save float32 and pass --dtype bf16";
  return "convert with x.astype(np.float32)";
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

NpyArray read_npy(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) bad(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) bad(path, "not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) bad(path, std::string("cannot open: ") + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) bad(path, "read error");

  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0)
    bad(path, "not a .npy file (the magic string \\x93NUMPY is missing)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (size_t(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad(path, "truncated .npy header");
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + size_t(i)]);
    header_start = 12;
  } else {
    bad(path, "unsupported .npy format version " + std::to_string(major) + " (expected 1, 2 or 3)");
  }
  if (bytes.size() < header_start + header_len) bad(path, "truncated .npy header");
  const std::string header = bytes.substr(header_start, header_len);
  auto dict = HeaderParser(header, path).parse();

  for (const char* key : {"descr", "fortran_order", "shape"})
    if (!dict.count(key)) bad(path, std::string("bad .npy header (no '") + key + "' entry)");
  const HeaderValue &descr = dict["descr"], &fortran = dict["fortran_order"], &shape = dict["shape"];
  if (descr.kind != HeaderValue::string) bad(path, "bad .npy header ('descr' is not a string)");
  if (fortran.kind != HeaderValue::boolean) bad(path, "bad .npy header ('fortran_order' is not True or False)");
  if (shape.kind != HeaderValue::tuple) bad(path, "bad .npy header ('shape' is not a tuple)");
  if (descr.s != "<f4" && descr.s != "<f2")
    bad(path, "dtype '" + descr.s + "' is not supported: convkit reads float32 ('<f4') and float16 ('<f2') (" +
                  describe_dtype(descr.s) + "; for bfloat16 save float32 and pass --dtype bf16)");
  if (fortran.b)
    bad(path, "fortran_order is True: convkit reads C-order arrays only (save np.ascontiguousarray(x))");

  NpyArray a;
  a.shape = shape.ints;
  a.dtype = descr.s == "<f2" ? DType::f16 : DType::f32;
  const uint64_t elem = dtype_size(a.dtype);
  uint64_t count = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / 8 / uint64_t(d))
      bad(path, "the shape " + shape_string(a.shape) + " is too large");
    count *= uint64_t(d);
  }
  const size_t data_start = header_start + header_len;
  const uint64_t want = count * elem, have = bytes.size() - data_start;
  if (have < want)
    bad(path, "truncated data: the shape " + shape_string(a.shape) + " needs " + std::to_string(want) +
                  " bytes but the file holds " + std::to_string(have));
  if (have > want)
    bad(path, "has " + std::to_string(have - want) + " bytes after the data of shape " + shape_string(a.shape));
  a.bytes.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end());
  return a;
}

int64_t NpyArray::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<unsigned char> NpyArray::as(DType to) const {
  if (to == dtype) return bytes;
  const int64_t n = count();
  std::vector<unsigned char> out(static_cast<size_t>(n) * dtype_size(to));
  for (int64_t i = 0; i < n; ++i)
    detail::store_from_double(out.data(), to, i, detail::load_as_double(bytes.data(), dtype, i));
  return out;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const void* data, DType dtype) {
  size_t count = 1;
  for (int64_t d : shape) count *= static_cast<size_t>(d);
  std::vector<unsigned char> widened;
  if (dtype == DType::bf16) {  // NumPy has no bfloat16: widen to float32 (exact)
    widened.resize(count * 4);
    for (size_t i = 0; i < count; ++i)
      detail::store_from_double(widened.data(), DType::f32, int64_t(i), detail::load_as_double(data, dtype, int64_t(i)));
    data = widened.data();
    dtype = DType::f32;
  }
  const size_t elem = dtype_size(dtype);
  std::string dict = std::string("{'descr': '") + (dtype == DType::f16 ? "<f2" : "<f4") +
                     "', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
  // Pad with spaces so that magic + version + length + header is a multiple of 64, ending in '\n'.
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string head(kMagic, 6);
  head += '\x01';
  head += '\x00';
  head += static_cast<char>(dict.size() & 0xff);
  head += static_cast<char>((dict.size() >> 8) & 0xff);
  head += dict;

  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string tmp = dir + "." + base + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) bad(path, std::string("cannot write: ") + std::strerror(errno));
    f.write(head.data(), static_cast<std::streamsize>(head.size()));
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(count * elem));
    f.flush();
    if (!f) {
      const std::string why = std::strerror(errno);
      f.close();
      std::remove(tmp.c_str());
      bad(path, "write failed: " + why);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    bad(path, "cannot rename the temporary file into place: " + why);
  }
}

}  // namespace convkit::cli
