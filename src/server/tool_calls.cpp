#include "server/tool_calls.h"

#include "server/json_parse.h"
#include "server/openai.h"  // json_depth_over, kMaxJsonDepth

#include <algorithm>
#include <random>

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=", kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=", kParamClose = "</parameter>";
constexpr std::string_view kMistral = "[TOOL_CALLS]", kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kFence = "```";
constexpr std::string_view kHStart = "<|start|>", kHChannel = "<|channel|>", kHMessage = "<|message|>";
constexpr std::string_view kHEnd = "<|end|>", kHCall = "<|call|>", kHReturn = "<|return|>";
constexpr std::string_view kHConstrain = "<|constrain|>";
/// A name or a header between markers longer than this: not a call.
constexpr size_t kMaxName = 256;

// Model output may hold invalid UTF-8: dumps replace it (U+FFFD) rather than throw.
bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_ws(std::string_view t, size_t p) {
  while (p < t.size() && is_ws(t[p])) ++p;
  return p;
}

enum class Match { yes, partial, no };

/// Whether `lit` is at t[p]: yes, partial (t ends inside it), no.
Match match_at(std::string_view t, size_t p, std::string_view lit) {
  const size_t n = std::min(lit.size(), t.size() - std::min(p, t.size()));
  if (t.substr(p, n) != lit.substr(0, n)) return Match::no;
  return n == lit.size() ? Match::yes : Match::partial;
}

/// How many bytes at the end of t[from..] may be the start of `marker`.
size_t held_suffix(std::string_view t, size_t from, std::string_view marker) {
  const size_t avail = t.size() - from;
  for (size_t k = std::min(avail, marker.size() - 1); k > 0; --k)
    if (t.substr(t.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

size_t rtrim_len(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_ws(s[n - 1])) --n;
  return n;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_ws(s[b])) ++b;
  while (e > b && is_ws(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

/// Parses t[b, e) as JSON; discarded on any error or when nested too deep.
json parse_json(std::string_view t) {
  if (json_depth_over(t, kMaxJsonDepth) != 0) return json(json::value_t::discarded);
  return parse_json_ordered_or_discarded(t);
}

/// The arguments of a call as compact JSON object text, or "" when they are
/// not an object (nor a string holding one). Absent arguments are {}.
std::string arguments_text(const json* args) {
  if (!args || args->is_null()) return "{}";
  if (args->is_object()) return args->dump(-1, ' ', false, json::error_handler_t::replace);
  if (args->is_string()) {
    json inner = parse_json(args->get_ref<const std::string&>());
    if (inner.is_object()) return inner.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return "";
}

/// {"name", "arguments" | "parameters"} or {"function": {...}} as a call;
/// false when `v` is not that shape.
bool call_of(const json& v, ToolCall* out) {
  if (!v.is_object()) return false;
  const json* o = &v;
  if (auto fn = v.find("function"); fn != v.end() && fn->is_object()) o = &*fn;
  auto name = o->find("name");
  if (name == o->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return false;
  const json* args = nullptr;
  for (const char* k : {"arguments", "parameters"})
    if (auto a = o->find(k); a != o->end()) args = &*a;
  std::string a = arguments_text(args);
  if (a.empty()) return false;
  out->name = name->get<std::string>();
  out->arguments = std::move(a);
  return true;
}

struct CallResult {
  enum Status { ok, incomplete, invalid } status = invalid;
  size_t end = 0;
  std::vector<ToolCall> calls;
};

CallResult incomplete() { return {CallResult::incomplete, 0, {}}; }
CallResult invalid() { return {CallResult::invalid, 0, {}}; }

struct ValueResult {
  CallResult::Status status = CallResult::invalid;
  size_t end = 0;
  json value;
};

/// The JSON value (object, array or string) at t[p], after whitespace.
ValueResult json_at(std::string_view t, size_t p, bool final) {
  p = skip_ws(t, p);
  if (p >= t.size()) return {final ? CallResult::invalid : CallResult::incomplete, 0, {}};
  const size_t e = json_value_end(t, p);
  if (e == std::string::npos) return {final ? CallResult::invalid : CallResult::incomplete, 0, {}};
  if (e == p) return {};
  json v = parse_json(t.substr(p, e - p));
  if (v.is_discarded()) return {};
  return {CallResult::ok, e, std::move(v)};
}

/// A JSON value at t[p] (after whitespace) that is one call or a list of
/// calls (`list_ok`), or {"tool_calls": [...]} (`wrapped_ok`).
CallResult json_calls(std::string_view t, size_t p, bool final, bool list_ok, bool wrapped_ok) {
  ValueResult vr = json_at(t, p, final);
  if (vr.status != CallResult::ok) return {vr.status, 0, {}};
  const size_t e = vr.end;
  const json& v = vr.value;
  CallResult r{CallResult::ok, e, {}};
  const json* list = nullptr;
  if (v.is_array() && list_ok) list = &v;
  if (v.is_object() && wrapped_ok)
    if (auto tc = v.find("tool_calls"); tc != v.end() && tc->is_array()) list = &*tc;
  if (list) {
    for (const json& item : *list) {
      ToolCall c;
      if (!call_of(item, &c)) return invalid();
      r.calls.push_back(std::move(c));
    }
    if (r.calls.empty()) return invalid();
    return r;
  }
  ToolCall c;
  if (!call_of(v, &c)) return invalid();
  r.calls.push_back(std::move(c));
  return r;
}

/// Text up to `end` from p (a name, a header), at most kMaxName bytes.
/// Returns npos-like status through `st`.
CallResult::Status until(std::string_view t, size_t p, std::string_view end, bool final, size_t* at) {
  const size_t e = t.find(end, p);
  if (e == std::string_view::npos || e - p > kMaxName) {
    if (t.size() - p > kMaxName + end.size() || final) return CallResult::invalid;
    return CallResult::incomplete;
  }
  *at = e;
  return CallResult::ok;
}

/// An optional closing literal at p: consumed when there, fine when absent
/// at the end of a final text; incomplete while the text ends inside it.
bool optional_close(std::string_view t, size_t* p, std::string_view lit, bool final, bool* wait) {
  const size_t q = skip_ws(t, *p);
  const Match m = match_at(t, q, lit);
  if (m == Match::yes) {
    *p = q + lit.size();
    return true;
  }
  if ((m == Match::partial || q == t.size()) && !final) *wait = true;
  return false;
}

json param_value(const std::string& raw, const std::string& fn, const std::string& param,
                 const std::vector<ToolSpec>& specs) {
  for (const ToolSpec& s : specs) {
    if (s.name != fn) continue;
    auto props = s.parameters.find("properties");
    if (props == s.parameters.end() || !props->is_object()) break;
    auto p = props->find(param);
    if (p != props->end() && p->is_object()) {
      auto ty = p->find("type");
      if (ty != p->end() && ty->is_string() && *ty == "string") return raw;
    }
    break;
  }
  json v = parse_json(raw);
  if (v.is_discarded()) return raw;
  return v;
}

/// Qwen3-Coder: <function=NAME> (<parameter=P>\nVALUE\n</parameter>)* </function>, at t[p].
CallResult xml_call(std::string_view t, size_t p, bool final, const std::vector<ToolSpec>& specs) {
  p = skip_ws(t, p);
  const Match m = match_at(t, p, kFunctionOpen);
  if (m == Match::no) return invalid();
  if (m == Match::partial) return final ? invalid() : incomplete();
  p += kFunctionOpen.size();
  size_t e = 0;
  if (auto st = until(t, p, ">", final, &e); st != CallResult::ok) return {st, 0, {}};
  ToolCall c;
  c.name = trim(t.substr(p, e - p));
  if (c.name.empty()) return invalid();
  p = e + 1;
  json args = json::object();
  for (;;) {
    p = skip_ws(t, p);
    if (match_at(t, p, kFunctionClose) == Match::yes) {
      p += kFunctionClose.size();
      break;
    }
    const Match pm = match_at(t, p, kParamOpen);
    if (pm == Match::no) {
      if (!final && match_at(t, p, kFunctionClose) == Match::partial) return incomplete();
      return invalid();
    }
    if (pm == Match::partial) return final ? invalid() : incomplete();
    p += kParamOpen.size();
    if (auto st = until(t, p, ">", final, &e); st != CallResult::ok) return {st, 0, {}};
    const std::string pname = trim(t.substr(p, e - p));
    p = e + 1;
    const size_t close = t.find(kParamClose, p);
    if (close == std::string_view::npos) return final ? invalid() : incomplete();
    std::string_view raw = t.substr(p, close - p);
    if (!raw.empty() && raw.front() == '\n') raw.remove_prefix(1);
    if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
    args[pname] = param_value(std::string(raw), c.name, pname, specs);
    p = close + kParamClose.size();
  }
  c.arguments = args.dump(-1, ' ', false, json::error_handler_t::replace);
  return {CallResult::ok, p, {std::move(c)}};
}

/// The calls after a format's marker (which ends at p).
CallResult calls_after_marker(std::string_view t, size_t p, bool final, const OutputFormat& f) {
  bool wait = false;
  switch (f.format) {
    case ToolFormat::hermes:
    case ToolFormat::qwen3_coder: {
      const size_t q = skip_ws(t, p);
      CallResult r = (match_at(t, q, kFunctionOpen) != Match::no && t.size() > q && t[q] == '<')
                         ? xml_call(t, q, final, f.specs)
                         : json_calls(t, q, final, false, false);
      if (r.status != CallResult::ok) return r;
      optional_close(t, &r.end, kHermesClose, final, &wait);
      return wait ? incomplete() : r;
    }
    case ToolFormat::mistral: {
      const size_t q = skip_ws(t, p);
      if (q < t.size() && t[q] != '[' && t[q] != '{') {  // v11: [TOOL_CALLS]NAME[ARGS]{...}
        size_t e = 0;
        if (auto st = until(t, q, kMistralArgs, final, &e); st != CallResult::ok) return {st, 0, {}};
        ValueResult a = json_at(t, e + kMistralArgs.size(), final);
        if (a.status != CallResult::ok) return {a.status, 0, {}};
        if (!a.value.is_object()) return invalid();
        std::string name = trim(t.substr(q, e - q));
        if (name.empty()) return invalid();
        return {CallResult::ok, a.end, {ToolCall{"", std::move(name), a.value.dump(-1, ' ', false, json::error_handler_t::replace)}}};
      }
      return json_calls(t, q, final, true, false);
    }
    case ToolFormat::llama3: {
      CallResult r = json_calls(t, p, final, false, false);
      if (r.status != CallResult::ok) return r;
      // <|python_tag|> may carry several calls separated by ';'.
      for (;;) {
        size_t q = skip_ws(t, r.end);
        if (q >= t.size() || t[q] != ';') break;
        CallResult more = json_calls(t, q + 1, final, false, false);
        if (more.status == CallResult::incomplete) return more;
        if (more.status != CallResult::ok) break;
        r.calls.insert(r.calls.end(), more.calls.begin(), more.calls.end());
        r.end = more.end;
      }
      return r;
    }
    case ToolFormat::deepseek: {
      CallResult r{CallResult::ok, p, {}};
      for (;;) {
        size_t q = skip_ws(t, r.end);
        if (q >= t.size()) return final && !r.calls.empty() ? r : (final ? invalid() : incomplete());
        if (match_at(t, q, kDsCallsEnd) == Match::yes) {
          r.end = q + kDsCallsEnd.size();
          return r.calls.empty() ? invalid() : r;
        }
        const Match m = match_at(t, q, kDsCallBegin);
        if (m != Match::yes) {
          if (m == Match::partial || match_at(t, q, kDsCallsEnd) == Match::partial)
            return final ? (r.calls.empty() ? invalid() : r) : incomplete();
          return r.calls.empty() ? invalid() : r;
        }
        q += kDsCallBegin.size();
        size_t sep = 0;
        if (auto st = until(t, q, kDsSep, final, &sep); st != CallResult::ok) return {st, 0, {}};
        const std::string head = trim(t.substr(q, sep - q));
        q = sep + kDsSep.size();
        std::string name = head;
        bool fenced = false;
        if (head == "function") {  // R1 / V3: type<sep>name\n```json\n{...}\n```
          size_t nl = 0;
          if (auto st = until(t, q, "\n", final, &nl); st != CallResult::ok) return {st, 0, {}};
          name = trim(t.substr(q, nl - q));
          q = skip_ws(t, nl);
          const Match fm = match_at(t, q, "```json");
          if (fm == Match::partial) return final ? invalid() : incomplete();
          if (fm == Match::yes) {
            q += 7;
            fenced = true;
          }
        }
        if (name.empty()) return invalid();
        ValueResult one = json_at(t, q, final);
        if (one.status != CallResult::ok) return {one.status, 0, {}};
        if (!one.value.is_object()) return invalid();
        const json& a = one.value;
        size_t e = one.end;
        if (fenced) optional_close(t, &e, kFence, final, &wait);
        const bool closed = !wait && optional_close(t, &e, kDsCallEnd, final, &wait);
        if (wait) return incomplete();
        // Only the end of the reply may stand for a missing <｜tool▁call▁end｜>
        // (the same answer whether or not more text could follow).
        if (!closed && skip_ws(t, e) < t.size()) return invalid();
        r.calls.push_back(ToolCall{"", name, a.dump(-1, ' ', false, json::error_handler_t::replace)});
        r.end = e;
      }
    }
    case ToolFormat::harmony:  // scan_harmony
    case ToolFormat::generic:
      break;
  }
  return invalid();
}

CallResult json_calls_any(std::string_view t, size_t p, bool final) {
  // The same as json_calls, but the arguments-only shape of a bare call
  // (DeepSeek's value) is handled by its caller; here a value must be a call.
  return json_calls(t, p, final, true, true);
}

/// The reply at t[p] is a bare JSON call (llama3, generic): `{`, `[` or a
/// ```json fence, as the whole reply.
CallResult bare_calls(std::string_view t, size_t p, bool final, bool generic) {
  bool fenced = false;
  if (generic) {
    const Match fm = match_at(t, p, kFence);
    if (fm == Match::partial) return final ? invalid() : incomplete();
    if (fm == Match::yes) {
      size_t q = p + kFence.size();
      if (match_at(t, q, "json") == Match::yes) q += 4;
      else if (match_at(t, q, "json") == Match::partial) return final ? invalid() : incomplete();
      p = q;
      fenced = true;
    }
  }
  CallResult r = generic ? json_calls_any(t, p, final) : json_calls(t, p, final, false, false);
  if (r.status == CallResult::ok && fenced) {
    bool wait = false;
    optional_close(t, &r.end, kFence, final, &wait);
    if (wait) return incomplete();
  }
  return r;
}

/// Every call names one of the offered functions (none offered: any name).
bool known_names(const std::vector<ToolCall>& calls, const std::vector<ToolSpec>& specs) {
  if (specs.empty()) return true;
  return std::all_of(calls.begin(), calls.end(), [&](const ToolCall& c) {
    return std::any_of(specs.begin(), specs.end(), [&](const ToolSpec& sp) { return sp.name == c.name; });
  });
}

struct Scan {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  bool malformed = false;
  /// Without tools: where the content begins, once that is settled (the
  /// reasoning closed or absent); npos while it may still change.
  size_t content_at = std::string::npos;
};

/// The marker that opens calls in `f`, and a second one it also takes.
std::pair<std::string_view, std::string_view> markers(ToolFormat f) {
  switch (f) {
    case ToolFormat::hermes: return {kHermesOpen, {}};
    case ToolFormat::qwen3_coder: return {kHermesOpen, kFunctionOpen};
    case ToolFormat::mistral: return {kMistral, {}};
    case ToolFormat::deepseek: return {kDsCallsBegin, kDsCallBegin};
    case ToolFormat::llama3: return {kPythonTag, {}};
    case ToolFormat::harmony:  // scan_harmony
    case ToolFormat::generic: return {{}, {}};
  }
  return {{}, {}};
}

/// The word after `key` in a Harmony header ("analysis" after <|channel|>,
/// "functions.get_weather" after "to="): up to a space or the next marker.
std::string header_word(std::string_view h, std::string_view key) {
  const size_t at = h.find(key);
  if (at == std::string_view::npos) return "";
  size_t b = at + key.size(), e = b;
  while (e < h.size() && !is_ws(h[e]) && h[e] != '<') ++e;
  return std::string(h.substr(b, e - b));
}

/// The first of Harmony's message ends at or after p: (position, marker).
std::pair<size_t, std::string_view> harmony_end(std::string_view t, size_t p) {
  std::pair<size_t, std::string_view> best{std::string_view::npos, {}};
  for (std::string_view m : {kHEnd, kHCall, kHReturn, kHStart}) {
    const size_t at = t.find(m, p);
    if (at < best.first) best = {at, m};
  }
  return best;
}

/// gpt-oss's Harmony reply (tool_calls.h), in scan()'s terms: every non-final
/// result is a prefix of the next (a marker's start at the end is held back,
/// a call is taken only once its message has ended or the reply has).
Scan scan_harmony(std::string_view t, const OutputFormat& f, bool final) {
  Scan s;
  if (!f.reasoning && !f.tools) {  // reasoning_format none: the reply as generated
    s.content = std::string(t);
    s.content_at = 0;
    return s;
  }
  size_t p = 0;
  bool first = true;
  auto add = [](std::string& to, std::string_view body, bool* started) {
    if (!*started && !to.empty() && !body.empty()) to += "\n\n";  // a second message of the same part
    if (!body.empty()) *started = true;
    to += body;
  };
  while (p < t.size()) {
    // A message starts with <|start|>, <|channel|>, or (the first one, whose
    // <|start|>assistant the prompt wrote) " to=" with the recipient.
    const bool opens = match_at(t, p, kHStart) != Match::no || match_at(t, p, kHChannel) != Match::no ||
                       (first && match_at(t, p, " to=") != Match::no);
    if (!opens) {
      // Not Harmony (or text between messages): content as written.
      const size_t next = t.find(kHStart, p);
      const size_t e = next == std::string_view::npos ? t.size() : next;
      size_t hold = 0;
      if (!final && next == std::string_view::npos)
        for (std::string_view m : {kHStart, kHChannel}) hold = std::max(hold, held_suffix(t, p, m));
      s.content += t.substr(p, e - p - hold);
      p = e == t.size() ? t.size() : e;
      if (hold) break;
      first = false;
      continue;
    }
    const size_t m = t.find(kHMessage, p);
    if (m == std::string_view::npos) {
      if (!final && t.size() - p <= 4 * kMaxName) break;  // the header is still coming
      s.content += t.substr(p);                          // a header without a message: as written
      s.malformed = true;
      break;
    }
    const std::string_view header = t.substr(p, m - p);
    const std::string channel = header_word(header, kHChannel), to = header_word(header, "to=");
    const size_t b = m + kHMessage.size();
    const auto [e, end_marker] = harmony_end(t, b);
    const bool ended = e != std::string_view::npos;
    size_t body_end = ended ? e : t.size();
    if (!ended && !final)
      for (std::string_view mk : {kHEnd, kHCall, kHReturn, kHStart}) body_end = std::min(body_end, t.size() - held_suffix(t, b, mk));
    const std::string_view body = t.substr(b, body_end - b);
    const size_t next = !ended ? t.size() : end_marker == kHStart ? e : e + end_marker.size();
    first = false;
    if (to.rfind("functions.", 0) == 0 && f.tools) {
      if (!ended && !final) break;  // a call is sent whole
      ToolCall c;
      c.name = to.substr(10);
      ValueResult v = json_at(body, 0, true);
      const std::string args = v.status == CallResult::ok && skip_ws(body, v.end) == body.size()
                                   ? arguments_text(&v.value) : "";
      if (c.name.empty() || args.empty() || !known_names({ToolCall{"", c.name, args}}, f.specs)) {
        s.malformed = true;
        s.content += t.substr(p, next - p);
      } else {
        c.arguments = args;
        s.calls.push_back(std::move(c));
        if (f.stop_after_call) break;
      }
    } else if (channel == "analysis" && f.reasoning) {
      bool started = false;
      add(s.reasoning, body, &started);
    } else if (channel == "analysis") {  // reasoning_format none (with tools): the message as generated
      s.content += t.substr(p, (ended ? next : b + body.size()) - p);
    } else {  // final, commentary to the user, or a call nobody offered tools for
      bool started = false;
      add(s.content, body, &started);
    }
    if (!ended) break;
    p = next;
  }
  if (!f.parallel && s.calls.size() > 1) s.calls.resize(1);
  return s;
}

/// Splits `t` (the whole reply so far) into parts. When !final, what may
/// still change (a marker's start, an unfinished call, trailing whitespace
/// with tools) is left out, so that every result is a prefix of the next.
Scan scan(std::string_view t, const OutputFormat& f, bool final) {
  if (f.format == ToolFormat::harmony) return scan_harmony(t, f, final);
  Scan s;
  size_t p = 0;
  if (f.reasoning) {
    bool in_think = f.think_open;
    if (!in_think) {
      const size_t q = skip_ws(t, 0);
      const Match m = match_at(t, q, kThinkOpen);
      if (m == Match::partial && !final) return s;
      if (m == Match::yes) {
        in_think = true;
        p = q + kThinkOpen.size();
      }
    }
    if (in_think) {
      const size_t close = t.find(kThinkClose, p);
      const size_t b = skip_ws(t, p);
      if (close == std::string_view::npos) {
        std::string_view r = t.substr(std::min(b, t.size()));
        if (!final) r = r.substr(0, r.size() - held_suffix(r, 0, kThinkClose));
        s.reasoning = std::string(r.substr(0, final ? r.size() : rtrim_len(r)));
        if (final) s.reasoning = trim(s.reasoning);
        return s;
      }
      std::string_view r = close > b ? t.substr(b, close - b) : std::string_view();
      s.reasoning = std::string(r.substr(0, rtrim_len(r)));
      p = skip_ws(t, close + kThinkClose.size());
    }
  }
  if (!f.tools) {
    s.content = std::string(t.substr(p));
    if (p < t.size()) s.content_at = p;  // (leading whitespace after </think> is skipped up to here)
    return s;
  }
  const auto [m1, m2] = markers(f.format);
  const bool bare = f.format == ToolFormat::generic || f.format == ToolFormat::llama3;
  bool wait = false;
  bool first = true;
  while (p < t.size()) {
    // A bare JSON call: only as the start of the reply.
    if (bare && first && s.calls.empty()) {
      const size_t q = skip_ws(t, p);
      if (q == t.size()) {
        if (!final) wait = true;
        break;
      }
      if (t[q] == '{' || t[q] == '[' || (f.format == ToolFormat::generic && t[q] == '`')) {
        CallResult r = bare_calls(t, q, final, f.format == ToolFormat::generic);
        if (r.status == CallResult::incomplete) {
          wait = true;
          break;
        }
        if (r.status == CallResult::ok && !known_names(r.calls, f.specs)) {
          // A call of a function nobody offered: the text as the model wrote it.
          s.malformed = true;
          s.content += t.substr(p);
          p = t.size();
          break;
        }
        if (r.status == CallResult::ok) {
          s.calls.insert(s.calls.end(), r.calls.begin(), r.calls.end());
          p = r.end;
          if (f.stop_after_call) break;
          continue;
        }
        // JSON that is not a call is content (the model answered in JSON).
      }
    }
    first = false;
    size_t at = m1.empty() ? std::string_view::npos : t.find(m1, p);
    std::string_view mk = m1;
    if (!m2.empty()) {
      const size_t at2 = t.find(m2, p);
      if (at2 < at) {
        at = at2;
        mk = m2;
      }
    }
    if (at == std::string_view::npos) {
      size_t hold = 0;
      if (!final) {
        if (!m1.empty()) hold = held_suffix(t, p, m1);
        if (!m2.empty()) hold = std::max(hold, held_suffix(t, p, m2));
      }
      s.content += t.substr(p, t.size() - p - hold);
      p = t.size();
      break;
    }
    s.content += t.substr(p, at - p);
    // qwen3_coder's bare <function=...>: the marker is part of the call.
    const size_t after = (mk == kFunctionOpen || mk == kDsCallBegin) ? at : at + mk.size();
    CallResult r = calls_after_marker(t, after, final, f);
    if (r.status == CallResult::incomplete) {
      wait = true;
      break;
    }
    if (r.status != CallResult::ok || !known_names(r.calls, f.specs)) {
      // Not a call after all: the rest is content, as the model wrote it.
      s.malformed = true;
      s.content += t.substr(at);
      p = t.size();
      break;
    }
    s.calls.insert(s.calls.end(), r.calls.begin(), r.calls.end());
    p = r.end;
    if (f.stop_after_call) break;
  }
  (void)wait;
  if (!final || !s.calls.empty()) s.content.resize(rtrim_len(s.content));
  if (!f.parallel && s.calls.size() > 1) s.calls.resize(1);
  return s;
}

std::string new_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::generic: return "generic";
    case ToolFormat::hermes: return "hermes";
    case ToolFormat::qwen3_coder: return "qwen3_coder";
    case ToolFormat::llama3: return "llama3";
    case ToolFormat::mistral: return "mistral";
    case ToolFormat::deepseek: return "deepseek";
    case ToolFormat::harmony: return "harmony";
  }
  return "generic";
}

std::vector<std::string_view> tool_format_markers(ToolFormat f) {
  switch (f) {
    case ToolFormat::hermes: return {kHermesOpen, kHermesClose};
    case ToolFormat::qwen3_coder: return {kHermesOpen, kHermesClose};
    case ToolFormat::mistral: return {kMistral, kMistralArgs};
    case ToolFormat::deepseek: return {kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd, kDsSep};
    case ToolFormat::llama3: return {kPythonTag};
    case ToolFormat::harmony: return {kHStart, kHChannel, kHMessage, kHEnd, kHCall, kHReturn, kHConstrain};
    case ToolFormat::generic: return {};
  }
  return {};
}

ToolFormat detect_tool_format(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("<|channel|>") && has("<|message|>")) return ToolFormat::harmony;
  if (has("<function=") && has("<parameter=")) return ToolFormat::qwen3_coder;
  if (has("<tool_call>")) return ToolFormat::hermes;
  if (has("[TOOL_CALLS]")) return ToolFormat::mistral;
  if (has("tool▁call▁begin") || has("tool_call_begin")) return ToolFormat::deepseek;
  if (has("<|python_tag|>") || has("\"parameters\": ")) return ToolFormat::llama3;
  return ToolFormat::generic;
}

size_t json_value_end(std::string_view t, size_t pos) {
  pos = skip_ws(t, pos);
  if (pos >= t.size()) return std::string::npos;
  const char c0 = t[pos];
  if (c0 != '{' && c0 != '[' && c0 != '"') return pos;
  int depth = 0;
  bool in_str = false, esc = false;
  for (size_t i = pos; i < t.size(); ++i) {
    const char c = t[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') {
        in_str = false;
        if (depth == 0) return i + 1;
      }
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
      if (depth < 0) return pos;
    }
  }
  return std::string::npos;
}

ParsedOutput parse_output(std::string_view text, const OutputFormat& f) {
  std::string all = f.prefix;
  all += text;
  Scan s = scan(all, f, /*final=*/true);
  ParsedOutput out{std::move(s.reasoning), std::move(s.content), std::move(s.calls), s.malformed};
  for (ToolCall& c : out.calls) c.id = new_call_id();
  return out;
}

OutputStream::OutputStream(OutputFormat f) : f_(std::move(f)), text_(f_.prefix) {}

OutputDelta OutputStream::push(std::string_view text) {
  text_ += text;
  if (passthrough_) {  // content only from here on: no re-scan (linear in the reply)
    OutputDelta d;
    d.content = std::string(text);
    sent_content_ += text.size();
    return d;
  }
  return step(false);
}

OutputDelta OutputStream::finish() { return step(true); }

OutputDelta OutputStream::step(bool final) {
  Scan s = scan(text_, f_, final);
  OutputDelta d;
  // Every non-final scan is a prefix of the later ones; guard anyway so a
  // bug can only lose text, never index out of range.
  if (s.reasoning.size() > sent_reasoning_) d.reasoning = s.reasoning.substr(sent_reasoning_);
  if (s.content.size() > sent_content_) d.content = s.content.substr(sent_content_);
  sent_reasoning_ = std::max(sent_reasoning_, s.reasoning.size());
  sent_content_ = std::max(sent_content_, s.content.size());
  for (size_t i = sent_calls_; i < s.calls.size(); ++i) {
    ToolCall c = s.calls[i];
    c.id = new_call_id();
    d.calls.emplace_back(static_cast<int>(i), std::move(c));
  }
  sent_calls_ = std::max(sent_calls_, s.calls.size());
  malformed_ = malformed_ || s.malformed;
  passthrough_ = !final && !f_.tools && s.content_at != std::string::npos;
  return d;
}

json allowed_calls_schema(const std::vector<ToolSpec>& tools, const ToolChoice& choice, bool parallel) {
  json any = json::array();
  for (const ToolSpec& t : tools) {
    if (choice.kind == ToolChoice::named && t.name != choice.name) continue;
    json params = t.parameters.is_object() ? t.parameters : json::object();
    any.push_back(json{{"type", "object"},
                       {"properties", {{"name", {{"const", t.name}}}, {"arguments", params}}},
                       {"required", json::array({"name", "arguments"})},
                       {"additionalProperties", false}});
  }
  json one = any.size() == 1 ? any[0] : json{{"anyOf", any}};
  if (!parallel || choice.kind == ToolChoice::named) return one;
  return json{{"type", "array"}, {"items", one}, {"minItems", 1}};
}

}  // namespace kvad::server
