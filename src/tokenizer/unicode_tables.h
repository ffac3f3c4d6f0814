// Internal: the generated Unicode tables (unicode_data.cpp, written by
// tools/make_unicode_tables.py). Read them through unicode.h.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kvad::tok::uni::data {

// Property ranges: code points [kPropStart[i], kPropStart[i + 1]) have the
// bits kPropBits[i] (unicode.h's Prop values).
extern const uint32_t kPropStart[];
extern const uint8_t kPropBits[];
extern const size_t kPropCount;

// Mappings cp -> sequence: sorted keys; sequence i is
// kXData[kXOff[i] .. kXOff[i + 1]).
extern const uint32_t kLowerKeys[], kLowerOff[], kLowerData[];
extern const size_t kLowerCount;
extern const uint32_t kNfdKeys[], kNfdOff[], kNfdData[];  // full canonical decomposition
extern const size_t kNfdCount;
extern const uint32_t kNfkdKeys[], kNfkdOff[], kNfkdData[];  // full compatibility decomposition, where it differs from NFD
extern const size_t kNfkdCount;

// Combining classes: (first, last, class) triples, sorted.
extern const uint32_t kCcc[];
extern const size_t kCccCount;
// Primary composites: (first, second, composite) triples, sorted by (first, second).
extern const uint32_t kCompose[];
extern const size_t kComposeCount;

// Regex classes (Oniguruma's, as tokenizers uses them): kRegexClassNames[i]
// ("L", "Lu", ..., "s", "w", "d") covers the (first, last) ranges
// kRegexClassRanges[2k], [2k + 1] for k in [kRegexClassOff[i], kRegexClassOff[i + 1]).
extern const char* const kRegexClassNames[];
extern const uint32_t kRegexClassOff[], kRegexClassRanges[];
extern const size_t kRegexClassCount;

}  // namespace kvad::tok::uni::data
