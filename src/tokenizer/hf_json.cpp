// JSON access with error context, bounded parsing, and the Pattern type of
// tokenizers' Replace/Split (PCRE2).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

#include "base/error.h"
#include "tokenizer/hf_parts.h"
#include "tokenizer/unicode.h"

namespace kvad::tok::hf {

namespace {

const char* kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "a value of another kind";
  }
}

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buf{};
  pcre2_get_error_message(code, buf.data(), buf.size());
  return reinterpret_cast<const char*>(buf.data());
}

// Per-thread match data and a match context with limits, so that no pattern
// from a file can make a match run without bound.
struct Scratch {
  pcre2_match_data* md = pcre2_match_data_create(16, nullptr);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  Scratch() {
    pcre2_set_match_limit(mctx, 50'000'000);
    pcre2_set_depth_limit(mctx, 100'000);
    pcre2_set_heap_limit(mctx, 64 * 1024);  // KiB
    if (jstack) pcre2_jit_stack_assign(mctx, nullptr, jstack);
  }
  ~Scratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    if (jstack) pcre2_jit_stack_free(jstack);
  }
};

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges merged(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [a, b] : r) {
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

void emit(std::string& o, const Ranges& r) {
  char buf[32];
  for (const auto& [a, b] : r) {
    if (a == b) std::snprintf(buf, sizeof buf, "\\x{%X}", a);
    else std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", a, b);
    o += buf;
  }
}

// Oniguruma (tokenizers' engine, Ruby syntax) -> PCRE2. The two agree on
// the syntax models use, but their Unicode tables are of different
// versions; \p{..} classes and \s \w \d (and Ruby's \h, a hex digit) are
// written out as the code point ranges tokenizers itself has (unicode.h
// regex_class). A pattern this does not follow (nested or intersected
// classes) is returned as it is.
std::string onig_to_pcre2(const std::string& p) {
  std::string out;
  bool in_class = false;
  Ranges acc, r;
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      std::string name;
      bool neg = false;
      size_t len = 2;
      if (e == 'p' || e == 'P') {
        neg = e == 'P';
        if (i + 2 < p.size() && p[i + 2] == '{') {
          const size_t close = p.find('}', i + 3);
          if (close == std::string::npos) return p;
          name = p.substr(i + 3, close - i - 3);
          len = close + 1 - i;
          if (!name.empty() && name[0] == '^') {
            neg = !neg;
            name.erase(0, 1);
          }
        } else if (i + 2 < p.size()) {
          name = p.substr(i + 2, 1);
          len = 3;
        }
      } else if (e == 's' || e == 'w' || e == 'd' || e == 'S' || e == 'W' || e == 'D') {
        name = std::string(1, static_cast<char>(std::tolower(static_cast<unsigned char>(e))));
        neg = e != name[0];
      } else if (e == 'u' && i + 6 <= p.size() &&
                 std::all_of(p.begin() + i + 2, p.begin() + i + 6, [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; })) {
        out += "\\x{" + p.substr(i + 2, 4) + "}";  // Ruby's \uHHHH; PCRE2 spells it \x{HHHH}
        i += 6;
        continue;
      } else if (e == 'h' || e == 'H') {
        r = {{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
        name = "h";
        neg = e == 'H';
      }
      if (name == "h" || (!name.empty() && uni::regex_class(name, r))) {
        if (neg) r = complement(r);
        if (in_class) {
          acc.insert(acc.end(), r.begin(), r.end());
        } else {
          out += '[';
          emit(out, r);
          out += ']';
        }
        i += len;
        continue;
      }
      out.append(p, i, 2);
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      acc.clear();
      out += '[';
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') {
        out += "\\]";
        ++i;
      }
      continue;
    }
    if (in_class && (c == '[' || (c == '&' && i + 1 < p.size() && p[i + 1] == '&'))) return p;
    if (in_class && c == ']') {
      emit(out, merged(acc));
      out += ']';
      in_class = false;
      ++i;
      continue;
    }
    out += c;
    ++i;
  }
  return in_class ? p : out;
}

}  // namespace

void Ctx::fail(const std::string& path, const std::string& msg) const {
  throw Error(file_ + ": " + (path.empty() ? std::string("(top level)") : path) + ": " + msg);
}

const json& Ctx::at(const json& obj, const std::string& path, const char* key) const {
  if (!obj.is_object()) fail(path, std::string("expected an object, found ") + kind(obj));
  auto it = obj.find(key);
  if (it == obj.end()) fail(path.empty() ? key : path + "." + key, "missing");
  return *it;
}

const json* Ctx::find(const json& obj, const std::string& path, const char* key) const {
  if (!obj.is_object()) fail(path, std::string("expected an object, found ") + kind(obj));
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string Ctx::str(const json& v, const std::string& path) const {
  if (!v.is_string()) fail(path, std::string("expected a string, found ") + kind(v));
  return v.get<std::string>();
}

bool Ctx::boolean(const json& v, const std::string& path) const {
  if (!v.is_boolean()) fail(path, std::string("expected true or false, found ") + kind(v));
  return v.get<bool>();
}

int64_t Ctx::integer(const json& v, const std::string& path, int64_t lo, int64_t hi) const {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) fail(path, std::to_string(u) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    fail(path, std::string("expected an integer, found ") + kind(v));
  }
  if (x < lo || x > hi) fail(path, std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

const json& Ctx::array(const json& v, const std::string& path) const {
  if (!v.is_array()) fail(path, std::string("expected an array, found ") + kind(v));
  return v;
}

const json& Ctx::object(const json& v, const std::string& path) const {
  if (!v.is_object()) fail(path, std::string("expected an object, found ") + kind(v));
  return v;
}

std::string Ctx::opt_str(const json& obj, const std::string& path, const char* key, const std::string& def) const {
  const json* v = find(obj, path, key);
  return v ? str(*v, path + "." + key) : def;
}

bool Ctx::opt_bool(const json& obj, const std::string& path, const char* key, bool def) const {
  const json* v = find(obj, path, key);
  return v ? boolean(*v, path + "." + key) : def;
}

std::string Ctx::type(const json& obj, const std::string& path) const {
  return str(at(obj, path, "type"), path + ".type");
}

json parse_json(std::string_view text, const std::string& file) {
  if (text.size() > kMaxJsonBytes)
    throw Error(file + ": " + std::to_string(text.size()) + " bytes is more than the " + std::to_string(kMaxJsonBytes >> 20) +
                " MiB a tokenizer file may have");
  // The nesting is bounded first (a scan that skips strings), so that
  // neither the parser nor the recursive destructor can exhaust the stack.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      if (++depth > kMaxJsonDepth)
        throw Error(file + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (at byte " +
                    std::to_string(i) + ")");
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(file + ": not valid JSON: " + e.what());
  }
}

Pattern::Pattern(const Ctx& c, const json& j, const std::string& path) {
  c.object(j, path);
  if (j.size() != 1) c.fail(path, "expected {\"String\": ...} or {\"Regex\": ...}");
  if (const json* s = c.find(j, path, "String")) {
    literal_ = c.str(*s, path + ".String");
    return;
  }
  const json* r = c.find(j, path, "Regex");
  if (!r) c.fail(path, "expected {\"String\": ...} or {\"Regex\": ...}");
  const std::string re = c.str(*r, path + ".Regex");
  int err = 0;
  PCRE2_SIZE off = 0;
  const std::string rewritten = onig_to_pcre2(re);
  // MATCH_INVALID_UTF: decoders may hand over bytes that are not UTF-8.
  constexpr uint32_t kOptions = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(), kOptions, &err,
                                   &off, nullptr);
  if (!code && rewritten != re)
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(), kOptions, &err, &off, nullptr);
  if (!code) c.fail(path + ".Regex", "regex /" + re + "/: " + pcre2_message(err) + " at offset " + std::to_string(off));
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
  code_ = code;
}

Pattern::~Pattern() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Pattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  if (!code_) {
    if (literal_.empty()) {  // regex::escape("") matches the empty string everywhere
      for (size_t i = 0; i <= text.size();) {
        out.emplace_back(i, i);
        if (i == text.size()) break;
        ++i;
        while (i < text.size() && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) ++i;
      }
      return;
    }
    for (size_t p = text.find(literal_); p != std::string_view::npos; p = text.find(literal_, p + literal_.size()))
      out.emplace_back(p, p + literal_.size());
    return;
  }
  thread_local Scratch scratch;
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  auto next_char = [&](size_t p) {
    if (p >= text.size()) return p + 1;
    ++p;
    while (p < text.size() && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) ++p;
    return p;
  };
  while (pos <= text.size()) {
    int rc = pcre2_match(code, subj, text.size(), pos, 0, scratch.md, scratch.mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("regex match failed at byte " + std::to_string(pos) + ": " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.md);
    const size_t s = ov[0], e = ov[1];
    if (e < s || e > text.size()) {  // \K in a lookaround can do this; step on
      pos = next_char(pos);
      continue;
    }
    if (s == e && have_last && last_end == e) {
      pos = next_char(e);
      continue;
    }
    out.emplace_back(s, e);
    have_last = true;
    last_end = e;
    pos = s == e ? next_char(e) : e;
  }
}

}  // namespace kvad::tok::hf
