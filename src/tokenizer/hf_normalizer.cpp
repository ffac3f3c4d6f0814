// tokenizer.json normalizers. Source: tokenizers/src/normalizers/*.rs and the
// NormalizedString operations they call (tokenizer/normalizer.rs): filter,
// map, prepend, replace, lowercase, nfd/nfc/nfkd/nfkc, lrstrip.
#include <algorithm>

#include "base/error.h"
#include "base/scratch.h"
#include "base/utf8.h"
#include "tokenizer/hf_parts.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/unicode.h"

namespace kvad::tok::hf {

namespace {

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
}

// NormalizedString::filter: keeps the characters `keep` accepts. Removing the
// first character moves the start of the alignments past offset 0.
template <class F>
void filter(std::string& s, bool& at_start, F keep) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    const uint32_t cp = utf8::decode(s, i);
    if (keep(cp)) {
      out.append(s, b, i - b);
      first = false;
    } else if (first) {
      at_start = false;
    }
  }
  s.swap(out);
}

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s, bool& at_start) const override {
    for (const auto& p : parts_) p->normalize(s, at_start);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

enum class Form { NFC, NFD, NFKC, NFKD };

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(Form f) : form_(f) {}
  void normalize(std::string& s, bool&) const override {
    if (is_ascii(s)) return;
    const std::u32string u = uni::decode(s);
    switch (form_) {
      case Form::NFC: s = uni::encode(uni::nfc(u)); break;
      case Form::NFD: s = uni::encode(uni::nfd(u)); break;
      case Form::NFKC: s = uni::encode(uni::nfkc(u)); break;
      case Form::NFKD: s = uni::encode(uni::nfkd(u)); break;
    }
  }

 private:
  Form form_;
};

void lowercase(std::string& s) {
  if (is_ascii(s)) {
    for (char& c : s)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return;
  }
  s = uni::encode(uni::lowercase(uni::decode(s)));
}

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& s, bool&) const override { lowercase(s); }
};

class StripAccents final : public Normalizer {
 public:
  void normalize(std::string& s, bool& at_start) const override {
    if (is_ascii(s)) return;
    filter(s, at_start, [](uint32_t cp) { return !(uni::props(cp) & uni::kMark); });
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s, bool& at_start) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!uni::is_whitespace(utf8::decode(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t k = e - 1;
        while (k > b && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
        size_t i = k;
        if (!uni::is_whitespace(utf8::decode(s, i))) break;
        e = k;
      }
    }
    if (b > 0) at_start = false;
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void normalize(std::string& s, bool&) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class Replace final : public Normalizer {
 public:
  Replace(const Ctx& c, const json& j, const std::string& path)
      : pattern_(c, c.at(j, path, "pattern"), path + ".pattern"), content_(c.str(c.at(j, path, "content"), path + ".content")) {}
  void normalize(std::string& s, bool& at_start) const override {
    thread_local std::vector<std::pair<size_t, size_t>> m;
    ScratchTrim trim(m);
    pattern_.find_all(s, m);
    if (m.empty()) return;
    std::string out;
    out.reserve(s.size());
    size_t last = 0;
    for (const auto& [b, e] : m) {
      out.append(s, last, b - last);
      out += content_;
      last = e;
    }
    out.append(s, last, std::string::npos);
    if (content_.empty() && m.front().first == 0 && m.front().second > 0) at_start = false;
    s.swap(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// BertNormalizer (normalizers/bert.rs).
class Bert final : public Normalizer {
 public:
  Bert(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_(clean_text), chinese_(chinese), strip_(strip_accents), lower_(lowercase) {}
  void normalize(std::string& s, bool& at_start) const override {
    if (clean_) {
      filter(s, at_start, [](uint32_t cp) {
        if (cp == '\t' || cp == '\n' || cp == '\r') return true;
        return !(uni::props(cp) & uni::kOther);
      });
      std::string out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        const size_t b = i;
        const uint32_t cp = utf8::decode(s, i);
        if (cp == '\t' || cp == '\n' || cp == '\r' || uni::is_whitespace(cp)) out += ' ';
        else out.append(s, b, i - b);
      }
      s.swap(out);
    }
    if (chinese_ && !is_ascii(s)) {
      std::string out;
      out.reserve(s.size() + 8);
      for (size_t i = 0; i < s.size();) {
        const size_t b = i;
        const uint32_t cp = utf8::decode(s, i);
        if (uni::is_chinese_char(cp)) {
          out += ' ';
          out.append(s, b, i - b);
          out += ' ';
        } else {
          out.append(s, b, i - b);
        }
      }
      s.swap(out);
    }
    if (strip_ && !is_ascii(s)) {
      s = uni::encode(uni::nfd(uni::decode(s)));
      filter(s, at_start, [](uint32_t cp) { return !(uni::props(cp) & uni::kMn); });
    }
    if (lower_) lowercase(s);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

// Nmt (normalizers/unicode.rs do_nmt).
class Nmt final : public Normalizer {
 public:
  void normalize(std::string& s, bool& at_start) const override {
    filter(s, at_start, [](uint32_t c) {
      return !((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F);
    });
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const size_t b = i;
      const uint32_t c = utf8::decode(s, i);
      if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
          c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD)
        out += ' ';
      else
        out.append(s, b, i - b);
    }
    s.swap(out);
  }
};

// ByteLevel normalizer: every byte as its GPT-2 code point.
class ByteLevel final : public Normalizer {
 public:
  void normalize(std::string& s, bool&) const override {
    const auto& chars = byte_level_chars();
    std::string out;
    out.reserve(s.size() * 2);
    for (char c : s) out += chars[static_cast<uint8_t>(c)];
    s.swap(out);
  }
};

// Precompiled (normalizers/precompiled.rs): SentencePiece's rules from its
// model file, base64 in the JSON (tokenizer/precompiled.h).
class Precompiled final : public Normalizer {
 public:
  Precompiled(const Ctx& c, const json& j, const std::string& path) {
    const std::string p = path + ".precompiled_charsmap";
    const json* v = c.find(j, path, "precompiled_charsmap");
    const std::string text = v ? c.str(*v, p) : "";
    if (text.empty()) c.fail(p, "empty (no rules to read; tokenizers refuses it too)");
    const std::optional<std::string> blob = base64_decode(text);
    if (!blob) c.fail(p, "not base64");
    try {
      map_.emplace(*blob, "");
    } catch (const Error& e) {
      c.fail(p, e.what());
    }
  }
  void normalize(std::string& s, bool& at_start) const override {
    if (map_->normalize(s)) at_start = false;
  }

 private:
  std::optional<PrecompiledCharsmap> map_;  // always set after construction
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Ctx& c, const json& j, const std::string& path) {
  const std::string t = c.type(j, path);
  if (t == "Sequence") {
    const json& arr = c.array(c.at(j, path, "normalizers"), path + ".normalizers");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string p = path + ".normalizers[" + std::to_string(i) + "]";
      if (arr[i].is_null()) continue;
      parts.push_back(make_normalizer(c, arr[i], p));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  if (t == "NFC") return std::make_unique<UnicodeForm>(Form::NFC);
  if (t == "NFD") return std::make_unique<UnicodeForm>(Form::NFD);
  if (t == "NFKC") return std::make_unique<UnicodeForm>(Form::NFKC);
  if (t == "NFKD") return std::make_unique<UnicodeForm>(Form::NFKD);
  if (t == "Lowercase") return std::make_unique<Lowercase>();
  if (t == "StripAccents") return std::make_unique<StripAccents>();
  if (t == "Strip")
    return std::make_unique<Strip>(c.opt_bool(j, path, "strip_left", true), c.opt_bool(j, path, "strip_right", true));
  if (t == "Prepend") return std::make_unique<Prepend>(c.str(c.at(j, path, "prepend"), path + ".prepend"));
  if (t == "Replace") return std::make_unique<Replace>(c, j, path);
  if (t == "BertNormalizer") {
    const bool lower = c.opt_bool(j, path, "lowercase", true);
    const json* sa = c.find(j, path, "strip_accents");
    const bool strip = sa ? c.boolean(*sa, path + ".strip_accents") : lower;  // null: as lowercase
    return std::make_unique<Bert>(c.opt_bool(j, path, "clean_text", true), c.opt_bool(j, path, "handle_chinese_chars", true),
                                  strip, lower);
  }
  if (t == "Nmt") return std::make_unique<Nmt>();
  if (t == "ByteLevel") return std::make_unique<ByteLevel>();
  if (t == "Precompiled") return std::make_unique<Precompiled>(c, j, path);
  c.fail(path + ".type", "normalizer \"" + t +
                             "\" is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, "
                             "Strip, Prepend, Replace, BertNormalizer, Nmt, ByteLevel, Precompiled)");
}

}  // namespace kvad::tok::hf
