// tokenizer.json decoders and post-processors, and GPT-2's byte alphabet.
// Source: tokenizers/src/decoders/*.rs, pre_tokenizers/byte_level.rs and
// metaspace.rs (their Decoder impls), normalizers/replace.rs (Replace as a
// decoder), processors/{template,bert,roberta,sequence}.rs.
#include "base/scratch.h"
#include "base/utf8.h"
#include "tokenizer/hf_parts.h"

namespace kvad::tok::hf {

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> t = [] {
    std::array<std::string, 256> a;
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      utf8::append(a[b], printable ? b : 256 + n++);
    }
    return a;
  }();
  return t;
}

int byte_level_byte(uint32_t cp) {
  static const std::array<int16_t, 324> inv = [] {
    std::array<int16_t, 324> a{};
    a.fill(-1);
    const auto& chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      a[utf8::decode(chars[b], i)] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return cp < inv.size() ? inv[cp] : -1;
}

namespace {

// Rust's String::from_utf8_lossy: each maximal prefix of an invalid sequence
// becomes one U+FFFD.
std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    int need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t k = i + 1;
    int got = 0;
    while (got < need && k < s.size()) {
      const auto cc = static_cast<uint8_t>(s[k]);
      if (cc < (got == 0 ? lo : 0x80) || cc > (got == 0 ? hi : 0xBF)) break;
      ++k;
      ++got;
    }
    if (need > 0 && got == need) out.append(s, i, k - i);
    else out += "\xEF\xBF\xBD";
    i = need > 0 ? k : i + 1;
  }
  return out;
}

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& t, bool stream) const override {
    for (const auto& p : parts_) p->decode_chain(t, stream);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& t, bool stream) const override {
    std::string bytes;
    for (const std::string& tok : t) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0; i < tok.size() && all;) {
        const int b = byte_level_byte(utf8::decode(tok, i));
        if (b < 0) all = false;
        else bytes += static_cast<char>(b);
      }
      if (!all) {
        bytes.resize(mark);
        bytes += tok;
      }
    }
    t.assign(1, stream ? bytes : lossy(bytes));
  }
};

class Metaspace final : public Decoder {
 public:
  Metaspace(std::string rep, bool prepend) : rep_(std::move(rep)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& t, bool stream) const override {
    for (size_t i = 0; i < t.size(); ++i) {
      const bool drop = i == 0 && prepend_ && !stream;
      std::string out;
      const std::string& s = t[i];
      for (size_t k = 0; k < s.size();) {
        if (s.compare(k, rep_.size(), rep_) == 0) {
          if (!drop) out += ' ';
          k += rep_.size();
        } else {
          out += s[k++];
        }
      }
      t[i].swap(out);
    }
  }

 private:
  std::string rep_;
  bool prepend_;
};

void cleanup(std::string& s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},   {" ' ", "'"},  {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    const std::string_view f(from);
    if (s.find(f) == std::string::npos) continue;
    std::string out;
    size_t last = 0;
    for (size_t p = s.find(f); p != std::string::npos; p = s.find(f, last)) {
      out.append(s, last, p - last);
      out += to;
      last = p + f.size();
    }
    out.append(s, last, std::string::npos);
    s.swap(out);
  }
}

class WordPiece final : public Decoder {
 public:
  WordPiece(std::string prefix, bool clean) : prefix_(std::move(prefix)), cleanup_(clean) {}
  void decode_chain(std::vector<std::string>& t, bool stream) const override {
    for (size_t i = 0; i < t.size(); ++i) {
      if (i != 0 || stream) {
        if (t[i].compare(0, prefix_.size(), prefix_) == 0) t[i].erase(0, prefix_.size());
        else t[i].insert(0, 1, ' ');
      }
      if (cleanup_) cleanup(t[i]);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

bool valid_utf8(std::string_view s) { return lossy(s) == s; }

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& t, bool stream) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t n_bytes = 0;
    auto flush = [&] {
      if (n_bytes == 0) return;
      if (stream || valid_utf8(bytes)) out.push_back(bytes);
      else
        for (size_t k = 0; k < n_bytes; ++k) out.emplace_back("\xEF\xBF\xBD");
      bytes.clear();
      n_bytes = 0;
    };
    for (std::string& tok : t) {
      const int b = byte_token(tok);
      if (b >= 0) {
        bytes += static_cast<char>(b);
        ++n_bytes;
      } else {
        flush();
        out.push_back(std::move(tok));
      }
    }
    flush();
    t.swap(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& t, bool) const override {
    std::string all;
    for (const std::string& s : t) all += s;
    t.assign(1, all);
  }
};

class Strip final : public Decoder {
 public:
  Strip(uint32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& t, bool stream) const override {
    if (stream) return;
    for (std::string& s : t) {
      std::vector<std::pair<size_t, uint32_t>> chars;  // byte offset, code point
      for (size_t i = 0; i < s.size();) {
        const size_t b = i;
        chars.emplace_back(b, utf8::decode(s, i));
      }
      size_t start_cut = 0, stop_cut = chars.size();
      for (size_t i = 0; i < start_ && i < chars.size(); ++i) {
        if (chars[i].second != content_) break;
        start_cut = i + 1;
      }
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t idx = chars.size() - i - 1;
        if (chars[idx].second != content_) break;
        stop_cut = idx;
      }
      if (stop_cut <= start_cut) {
        s.clear();
        continue;
      }
      const size_t b = chars[start_cut].first;
      const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : s.size();
      s = s.substr(b, e - b);
    }
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  Replace(const Ctx& c, const json& j, const std::string& path)
      : pattern_(c, c.at(j, path, "pattern"), path + ".pattern"), content_(c.str(c.at(j, path, "content"), path + ".content")) {}
  void decode_chain(std::vector<std::string>& t, bool) const override {
    thread_local std::vector<std::pair<size_t, size_t>> m;
    ScratchTrim trim(m);
    for (std::string& s : t) {
      pattern_.find_all(s, m);
      if (m.empty()) continue;
      std::string out;
      size_t last = 0;
      for (const auto& [b, e] : m) {
        out.append(s, last, b - last);
        out += content_;
        last = e;
      }
      out.append(s, last, std::string::npos);
      s.swap(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class BpeDecoder final : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& t, bool stream) const override {
    if (suffix_.empty()) return;
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string rep = (i + 1 == t.size() && !stream) ? "" : " ";
      std::string& s = t[i];
      for (size_t p = s.find(suffix_); p != std::string::npos; p = s.find(suffix_, p + rep.size())) s.replace(p, suffix_.size(), rep);
    }
  }

 private:
  std::string suffix_;
};

uint32_t one_char(const Ctx& c, const json& j, const std::string& path) {
  const std::string s = c.str(j, path);
  size_t n = 0;
  const uint32_t cp = s.empty() ? 0 : utf8::decode(s, n);
  if (s.empty() || n != s.size()) c.fail(path, "expected one character");
  return cp;
}

// Post-processors.

class Template final : public PostProcessor {
 public:
  explicit Template(std::vector<std::vector<int32_t>> pieces) : pieces_(std::move(pieces)) {}
  // A piece is the ids of a special token, or empty for the sequence ($A).
  void process(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto& p : pieces_) {
      if (p.empty()) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), p.begin(), p.end());
    }
    ids.swap(out);
  }

 private:
  std::vector<std::vector<int32_t>> pieces_;
};

class Chain final : public PostProcessor {
 public:
  explicit Chain(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::unique_ptr<PostProcessor> template_processing(const Ctx& c, const json& j, const std::string& path) {
  std::unordered_map<std::string, std::vector<int32_t>> specials;
  if (const json* st = c.find(j, path, "special_tokens")) {
    const std::string sp = path + ".special_tokens";
    c.object(*st, sp);
    for (auto it = st->begin(); it != st->end(); ++it) {
      const std::string p = sp + "[\"" + it.key() + "\"]";
      const json& ids = c.array(c.at(it.value(), p, "ids"), p + ".ids");
      std::vector<int32_t> v;
      for (size_t i = 0; i < ids.size(); ++i)
        v.push_back(static_cast<int32_t>(c.integer(ids[i], p + ".ids[" + std::to_string(i) + "]", 0, kMaxTokenId)));
      if (v.empty()) c.fail(p + ".ids", "empty");
      specials[c.str(c.at(it.value(), p, "id"), p + ".id")] = std::move(v);
    }
  }
  const json& single = c.array(c.at(j, path, "single"), path + ".single");
  std::vector<std::vector<int32_t>> pieces;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string p = path + ".single[" + std::to_string(i) + "]";
    std::string special;
    bool sequence = false;
    if (single[i].is_string()) {  // "$A", "$A:0", "[CLS]", "[CLS]:0"
      std::string s = single[i].get<std::string>();
      if (size_t colon = s.rfind(':'); colon != std::string::npos && colon > 0) s.resize(colon);
      if (!s.empty() && s[0] == '$') sequence = true;
      else special = s;
    } else if (const json* st = c.find(single[i], p, "SpecialToken")) {
      special = c.str(c.at(*st, p + ".SpecialToken", "id"), p + ".SpecialToken.id");
    } else if (c.find(single[i], p, "Sequence")) {
      sequence = true;
    } else {
      c.fail(p, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
    if (sequence) {
      pieces.emplace_back();
      continue;
    }
    auto it = specials.find(special);
    if (it == specials.end()) c.fail(p, "special token \"" + special + "\" is not in special_tokens");
    pieces.push_back(it->second);
  }
  return std::make_unique<Template>(std::move(pieces));
}

int32_t named_id(const Ctx& c, const json& j, const std::string& path, const char* key) {
  const std::string p = path + "." + key;
  const json& v = c.array(c.at(j, path, key), p);
  if (v.size() != 2) c.fail(p, "expected [token, id]");
  c.str(v[0], p + "[0]");
  return static_cast<int32_t>(c.integer(v[1], p + "[1]", 0, kMaxTokenId));
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Ctx& c, const json& j, const std::string& path) {
  const std::string t = c.type(j, path);
  if (t == "Sequence") {
    const json& arr = c.array(c.at(j, path, "decoders"), path + ".decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < arr.size(); ++i) parts.push_back(make_decoder(c, arr[i], path + ".decoders[" + std::to_string(i) + "]"));
    return std::make_unique<Sequence>(std::move(parts));
  }
  if (t == "ByteLevel") return std::make_unique<ByteLevel>();
  if (t == "Metaspace") {
    const std::string rep = c.str(c.at(j, path, "replacement"), path + ".replacement");
    one_char(c, c.at(j, path, "replacement"), path + ".replacement");
    bool prepend = true;
    if (const json* ps = c.find(j, path, "prepend_scheme")) prepend = c.str(*ps, path + ".prepend_scheme") != "never";
    if (const json* ap = c.find(j, path, "add_prefix_space"))
      if (!c.boolean(*ap, path + ".add_prefix_space")) prepend = false;
    return std::make_unique<Metaspace>(rep, prepend);
  }
  if (t == "WordPiece")
    return std::make_unique<WordPiece>(c.opt_str(j, path, "prefix", "##"), c.opt_bool(j, path, "cleanup", true));
  if (t == "ByteFallback") return std::make_unique<ByteFallback>();
  if (t == "Fuse") return std::make_unique<Fuse>();
  if (t == "Strip") {
    const uint32_t cp = one_char(c, c.at(j, path, "content"), path + ".content");
    const auto start = static_cast<size_t>(c.integer(c.at(j, path, "start"), path + ".start", 0, 1 << 20));
    const auto stop = static_cast<size_t>(c.integer(c.at(j, path, "stop"), path + ".stop", 0, 1 << 20));
    return std::make_unique<Strip>(cp, start, stop);
  }
  if (t == "Replace") return std::make_unique<Replace>(c, j, path);
  if (t == "BPEDecoder") return std::make_unique<BpeDecoder>(c.opt_str(j, path, "suffix", "</w>"));
  c.fail(path + ".type", "decoder \"" + t +
                             "\" is not supported (supported: Sequence, ByteLevel, Metaspace, WordPiece, ByteFallback, "
                             "Fuse, Strip, Replace, BPEDecoder)");
}

std::unique_ptr<PostProcessor> make_post_processor(const Ctx& c, const json& j, const std::string& path) {
  const std::string t = c.type(j, path);
  if (t == "TemplateProcessing") return template_processing(c, j, path);
  if (t == "BertProcessing" || t == "RobertaProcessing") {
    const int32_t cls = named_id(c, j, path, "cls"), sep = named_id(c, j, path, "sep");
    return std::make_unique<Template>(std::vector<std::vector<int32_t>>{{cls}, {}, {sep}});
  }
  if (t == "ByteLevel") return std::make_unique<Template>(std::vector<std::vector<int32_t>>{{}});
  if (t == "Sequence") {
    const json& arr = c.array(c.at(j, path, "processors"), path + ".processors");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < arr.size(); ++i)
      parts.push_back(make_post_processor(c, arr[i], path + ".processors[" + std::to_string(i) + "]"));
    return std::make_unique<Chain>(std::move(parts));
  }
  c.fail(path + ".type", "post-processor \"" + t +
                             "\" is not supported (supported: TemplateProcessing, BertProcessing, RobertaProcessing, "
                             "ByteLevel, Sequence)");
}

std::unique_ptr<PostProcessor> make_bos_eos_processor(int32_t bos, int32_t eos) {
  std::vector<std::vector<int32_t>> p;
  if (bos >= 0) p.push_back({bos});
  p.emplace_back();
  if (eos >= 0) p.push_back({eos});
  return std::make_unique<Template>(std::move(p));
}

}  // namespace kvad::tok::hf
