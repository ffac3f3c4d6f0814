#include "hub/sha256.h"

#include <openssl/evp.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "base/error.h"

namespace kvad::hub {

namespace {
EVP_MD_CTX* ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }
}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) throw Error("sha256: out of memory");
  reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx(ctx_)); }

void Sha256::reset() {
  if (EVP_DigestInit_ex(ctx(ctx_), EVP_sha256(), nullptr) != 1) throw Error("sha256: EVP_DigestInit_ex failed");
}

void Sha256::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(ctx(ctx_), data, n) != 1) throw Error("sha256: EVP_DigestUpdate failed");
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx(ctx_), md, &len) != 1) throw Error("sha256: EVP_DigestFinal_ex failed");
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (unsigned int k = 0; k < len; ++k) {
    s += kHex[md[k] >> 4];
    s += kHex[md[k] & 15];
  }
  reset();
  return s;
}

void sha256_update_from_file(Sha256& h, const std::string& path, size_t bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw Error("cannot read " + path + " to hash it");
  std::vector<unsigned char> buf(1 << 20);
  size_t left = bytes;
  while (left > 0) {
    const size_t want = left < buf.size() ? left : buf.size();
    const size_t got = std::fread(buf.data(), 1, want, f.get());
    h.update(buf.data(), got);
    left -= got;
    if (got < want) {
      if (bytes != SIZE_MAX || std::ferror(f.get())) throw Error("cannot read " + path + " to hash it");
      break;
    }
  }
}

}  // namespace kvad::hub
