#include "tokenizer/clip_vocab.h"

#include <zlib.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"

// The gzip file, assembled into .rodata as it is (KVAD_CLIP_VOCAB_GZ: its
// absolute path, set by CMake).
__asm__(".pushsection .rodata\n"
        ".global kvad_clip_vocab_gz\n.hidden kvad_clip_vocab_gz\n"
        ".global kvad_clip_vocab_gz_end\n.hidden kvad_clip_vocab_gz_end\n"
        "kvad_clip_vocab_gz:\n"
        ".incbin \"" KVAD_CLIP_VOCAB_GZ "\"\n"
        "kvad_clip_vocab_gz_end:\n"
        ".popsection\n");
extern "C" const unsigned char kvad_clip_vocab_gz[];
extern "C" const unsigned char kvad_clip_vocab_gz_end[];

namespace kvad {
namespace {

constexpr size_t kMaxText = size_t{16} << 20;  // the text inflates to about 1.6 MiB
constexpr int kVocab = 49408, kMerges = 49152 - 256 - 2;

std::string inflate_gzip(const unsigned char* data, size_t size) {
  z_stream s{};
  if (inflateInit2(&s, 16 + MAX_WBITS) != Z_OK) throw Error("built-in CLIP vocabulary: zlib inflateInit2 failed");
  s.next_in = const_cast<Bytef*>(data);
  s.avail_in = static_cast<uInt>(size);
  std::string out;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (out.size() >= kMaxText) break;
    const size_t at = out.size();
    out.resize(at + (size_t{1} << 20));
    s.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    s.avail_out = static_cast<uInt>(out.size() - at);
    rc = inflate(&s, Z_NO_FLUSH);
    out.resize(out.size() - s.avail_out);
  }
  inflateEnd(&s);
  if (rc != Z_STREAM_END) throw Error("built-in CLIP vocabulary: the embedded gzip data is corrupt");
  return out;
}

// GPT-2's byte -> printable character map (the order CLIP's vocabulary lists
// them in): the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ as themselves, then the
// other bytes in order as U+0100 onwards. UTF-8 of each.
std::vector<std::string> byte_chars() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<bool> printable(256, false);
  for (int b : bs) printable[static_cast<size_t>(b)] = true;
  std::vector<int> cps(bs);
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (!printable[static_cast<size_t>(b)]) cps.push_back(256 + n++);
  std::vector<std::string> out;
  for (int cp : cps) {
    std::string u;
    if (cp < 0x80) {
      u += static_cast<char>(cp);
    } else {  // < 0x800 here
      u += static_cast<char>(0xC0 | (cp >> 6));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace

ClipVocabTexts builtin_clip_vocab() {
  const std::string text =
      inflate_gzip(kvad_clip_vocab_gz, static_cast<size_t>(kvad_clip_vocab_gz_end - kvad_clip_vocab_gz));
  // Lines 2 .. kMerges+1 are the merges (the first is a version line).
  std::vector<std::string_view> merges;
  merges.reserve(kMerges);
  size_t at = text.find('\n');
  while (at != std::string::npos && merges.size() < static_cast<size_t>(kMerges)) {
    const size_t start = at + 1, end = text.find('\n', start);
    if (end == std::string::npos) break;
    merges.emplace_back(text.data() + start, end - start);
    at = end;
  }
  if (merges.size() != static_cast<size_t>(kMerges))
    throw Error("built-in CLIP vocabulary: " + std::to_string(merges.size()) + " merges, expected " +
                std::to_string(kMerges));

  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  const std::vector<std::string> chars = byte_chars();
  for (const std::string& c : chars) vocab[c] = id++;
  for (const std::string& c : chars) vocab[c + "</w>"] = id++;
  ClipVocabTexts out;
  out.merges_txt.reserve(text.size());
  out.merges_txt = "#version: 0.2\n";
  for (std::string_view m : merges) {
    const size_t sp = m.find(' ');
    if (sp == std::string_view::npos) throw Error("built-in CLIP vocabulary: a merge line without a space");
    std::string joined(m.substr(0, sp));
    joined += m.substr(sp + 1);
    vocab[joined] = id++;
    out.merges_txt.append(m).push_back('\n');
  }
  vocab["<|startoftext|>"] = id++;
  vocab["<|endoftext|>"] = id++;
  if (vocab.size() != static_cast<size_t>(kVocab))
    throw Error("built-in CLIP vocabulary: " + std::to_string(vocab.size()) + " distinct tokens, expected " +
                std::to_string(kVocab));
  out.vocab_json = vocab.dump();
  return out;
}

}  // namespace kvad
