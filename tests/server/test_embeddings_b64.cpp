// server/embeddings.h's base64 (RFC 4648 section 10 test vectors) and the
// little-endian f32 bytes /v1/embeddings encodes with it.
#include <gtest/gtest.h>

#include <string>

#include "server/embeddings.h"

namespace {

TEST(EmbeddingsBase64, Rfc4648Vectors) {
  const std::pair<std::string, std::string> cases[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                       {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                       {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, want] : cases) EXPECT_EQ(kvad::server::base64_encode(in.data(), in.size()), want) << in;
}

TEST(EmbeddingsBase64, FloatsAsLittleEndianBytes) {
  const float v[2] = {1.0f, -2.5f};  // 0x3f800000, 0xc0200000
  EXPECT_EQ(kvad::server::base64_encode(v, sizeof v), "AACAPwAAIMA=");
}

}  // namespace
