// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface: the hash the Hub
// names an LFS file by (its ETag and the blob's name in the cache).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvad::hub {

/// Incremental SHA-256. Not copyable.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  /// Adds `n` bytes.
  void update(const void* data, size_t n);
  /// The digest of everything added since construction or reset(), as 64
  /// lowercase hex digits; the object is reset afterwards.
  std::string hex_digest();
  /// Starts over, as if newly constructed.
  void reset();

 private:
  void* ctx_;  // EVP_MD_CTX
};

/// Hashes the first `bytes` bytes of `path` into `h` (all of it when
/// `bytes` is SIZE_MAX). Throws kvad::Error when the file cannot be read or
/// is shorter.
void sha256_update_from_file(Sha256& h, const std::string& path, size_t bytes = SIZE_MAX);

}  // namespace kvad::hub
