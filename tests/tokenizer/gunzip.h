// gzip decompression for the tests' compressed fixtures (zlib; link
// ZLIB::ZLIB). Shared by test_tokenizer_json and test_hf_reference.
#pragma once
#include <zlib.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace kvad::test {

/// The decompressed bytes of gzip data `gz`. Throws std::runtime_error on bad data.
inline std::string gunzip(const std::string& gz) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("inflateInit2");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buf[1 << 16];
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw std::runtime_error("bad gzip data");
    }
    out.append(buf, sizeof buf - zs.avail_out);
  } while (rc != Z_STREAM_END);
  inflateEnd(&zs);
  return out;
}

/// gunzip() of a whole file. Throws std::runtime_error when it cannot be read or is not gzip.
inline std::string gunzip_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return gunzip(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
}

}  // namespace kvad::test
