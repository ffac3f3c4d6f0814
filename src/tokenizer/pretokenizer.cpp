// Pre-tokenizer regexes by `tokenizer.ggml.pre` name, and the PCRE2 splitter.
// See pretokenizer.h for the sources and the split semantics.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "base/scratch.h"
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>
#include <memory>

#include "base/error.h"

namespace kvad::tok {

namespace {

// GPT-2's regex (openai/gpt-2 encoder.py).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3 (tokenizer.json); the case-insensitive group spelled out as ASCII
// classes, as llama.cpp does, so that only ASCII letters fold.
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 but single digits.
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's tekken (tokenizer.json, unadapted: PCRE2 has the categories).
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// o200k (OpenAI's GPT-4o and gpt-oss tokenizer, tiktoken's o200k_base
// pattern; llama.cpp's "gpt-4o"): tekken's letter classes with the
// contractions attached, which (as for Llama 3) fold ASCII letters only.
constexpr const char* kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Non-ASCII characters are written as PCRE2 \x{...} escapes so that no editor
// can change them by Unicode normalization.
constexpr const char* kBloom = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
constexpr const char* kCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct Entry {
  std::vector<std::string> names;
  PreTokenizerSpec spec;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      {{"default"},
       {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, false}},
      {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "roberta-bpe", "gigachat", "jina-es", "jina-de",
        "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code"},
       {{kGpt2}, false, false}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {{kLlama3}, true, true}},
      {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {{kLlama3}, false, false}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {{kQwen2}, false, false}},
      {{"starcoder", "smollm", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {{R"(\p{N})", kGpt2}, false, false}},
      {{"falcon"}, {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, false, false}},
      {{"deepseek-llm"},
       {{"[\r\n]",
         R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
         R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)", R"(\s+$)", kCjk, R"(\p{N}+)"},
        false, false}},
      {{"deepseek-coder"}, {{"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}, false, false}},
      {{"deepseek-v3"},
       {{R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
         R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
        false, false}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {{kBloom}, false, false}},
      {{"viking"}, {{kBloom, R"(\p{N})"}, false, false}},
      {{"tekken"}, {{kTekken}, true, true}},
      {{"gpt-4o"}, {{kO200k}, false, false}},
  };
  return t;
}

// Per-thread match scratch: match data, and a JIT stack larger than the default.
struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jstack = nullptr;
  MatchScratch() {
    md = pcre2_match_data_create(32, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (jstack) pcre2_jit_stack_assign(mctx, nullptr, jstack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    if (jstack) pcre2_jit_stack_free(jstack);
  }
};

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buf{};
  pcre2_get_error_message(code, buf.data(), buf.size());
  return reinterpret_cast<const char*>(buf.data());
}

}  // namespace

std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name) {
  for (const Entry& e : table())
    for (const std::string& n : e.names)
      if (n == name) return e.spec;
  return std::nullopt;
}

std::string supported_pre_tokenizers() {
  std::string s;
  for (const Entry& e : table())
    for (const std::string& n : e.names) {
      if (!s.empty()) s += ", ";
      s += n;
    }
  return s;
}

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF,
                                     &err, &off, nullptr);
    if (!code) {
      for (void* c : codes_) pcre2_code_free(static_cast<pcre2_code*>(c));
      throw Error("pre-tokenizer regex /" + p + "/: " + pcre2_message(err) + " at offset " + std::to_string(off));
    }
    jit_.push_back(pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0);
    codes_.push_back(code);
  }
}

RegexSplitter::~RegexSplitter() {
  for (void* c : codes_) pcre2_code_free(static_cast<pcre2_code*>(c));
}

void RegexSplitter::split(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local MatchScratch scratch;
  thread_local std::vector<std::pair<size_t, size_t>> next;
  ScratchTrim trim(next);
  out.clear();
  if (text.empty()) return;
  out.emplace_back(0, text.size());
  const auto* base = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (void* cv : codes_) {
    const auto* code = static_cast<const pcre2_code*>(cv);
    next.clear();
    for (const auto& [b, e] : out) {
      const PCRE2_SPTR subj = base + b;
      const size_t len = e - b;
      size_t pos = 0, gap = 0;
      while (pos < len) {
        int rc = pcre2_match(code, subj, len, pos, 0, scratch.md, scratch.mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0)
          throw Error("pre-tokenizer regex failed at byte " + std::to_string(b + pos) + ": " + pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.md);
        const size_t ms = ov[0], me = ov[1];
        if (me <= ms) {  // empty match: step over one character
          pos = ms + 1;
          while (pos < len && (subj[pos] & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (ms > gap) next.emplace_back(b + gap, b + ms);
        next.emplace_back(b + ms, b + me);
        gap = pos = me;
      }
      if (gap < len) next.emplace_back(b + gap, e);
    }
    out.swap(next);
  }
}

}  // namespace kvad::tok
