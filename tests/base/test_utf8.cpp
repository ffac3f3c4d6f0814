#include <gtest/gtest.h>

#include "base/utf8.h"

TEST(Utf8, IncompleteTail) {
  std::string e = "\xC3\xA9";      // é
  std::string euro = "\xE2\x82\xAC";  // €
  EXPECT_EQ(kvad::utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(kvad::utf8::incomplete_tail(e), 0u);
  EXPECT_EQ(kvad::utf8::incomplete_tail(e.substr(0, 1)), 1u);
  EXPECT_EQ(kvad::utf8::incomplete_tail(std::string("x").append(euro, 0, 2)), 2u);
  EXPECT_EQ(kvad::utf8::incomplete_tail(std::string("x").append(euro)), 0u);
}

TEST(Utf8, DecodeRoundTrip) {
  for (uint32_t cp : {0x41u, 0xE9u, 0x20ACu, 0x1F600u}) {
    std::string s;
    kvad::utf8::append(s, cp);
    size_t i = 0;
    EXPECT_EQ(kvad::utf8::decode(s, i), cp);
    EXPECT_EQ(i, s.size());
  }
  size_t i = 0;
  EXPECT_EQ(kvad::utf8::decode("\xFF", i), 0xFFFDu);
  EXPECT_EQ(i, 1u);
}
