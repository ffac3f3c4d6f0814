#include "engine/chat_prompt.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

// The texts that Tokenizer::encode(..., parse_special=true) turns into
// CONTROL / UNKNOWN tokens, by text, with their distinct lengths longest first.
struct ChatPrompt::Specials {
  std::unordered_map<std::string_view, int32_t> id;
  std::vector<size_t> lengths;
  bool first[256] = {};

  // The id of the longest control text at text[i], or -1.
  int32_t match(std::string_view text, size_t i) const {
    if (!first[static_cast<unsigned char>(text[i])]) return -1;
    for (size_t len : lengths) {
      if (i + len > text.size()) continue;
      auto it = id.find(text.substr(i, len));
      if (it != id.end()) return it->second;
    }
    return -1;
  }
};

ChatPrompt::ChatPrompt(ChatTemplate t, const Tokenizer& tok, std::string bos, std::string eos)
    : tmpl_(std::move(t)), tok_(&tok), bos_(std::move(bos)), eos_(std::move(eos)) {
  auto sp = std::make_shared<Specials>();
  for (int32_t i = 0; i < tok.n_vocab(); ++i) {
    const TokenType ty = tok.token_type(i);
    if (ty != TokenType::CONTROL && ty != TokenType::UNKNOWN) continue;
    const std::string& text = tok.token_text(i);
    if (text.empty()) continue;
    sp->id.emplace(std::string_view(text), i);  // the tokenizer outlives us (see tok_)
    sp->lengths.push_back(text.size());
    sp->first[static_cast<unsigned char>(text[0])] = true;
  }
  std::sort(sp->lengths.begin(), sp->lengths.end(), std::greater<>());
  sp->lengths.erase(std::unique(sp->lengths.begin(), sp->lengths.end()), sp->lengths.end());
  specials_ = std::move(sp);
}

ChatPrompt ChatPrompt::from_gguf(const gguf::File& f, const Tokenizer& tok) {
  const std::string src = f.get_string("tokenizer.chat_template", "");
  if (src.empty()) throw Error(f.path() + ": the model has no chat template (tokenizer.chat_template)");
  const std::string bos = tok.bos() >= 0 ? tok.token_text(tok.bos()) : "";
  const std::string eos = tok.eos() >= 0 ? tok.token_text(tok.eos()) : "";
  return ChatPrompt(ChatTemplate::parse(src), tok, bos, eos);
}

ChatPrompt ChatPrompt::from_tokenizer(const Tokenizer& tok, const std::string& origin) {
  const std::string& src = tok.chat_template();
  if (src.empty()) throw Error(origin + ": the model has no chat template");
  const std::string bos = tok.bos() >= 0 ? tok.token_text(tok.bos()) : "";
  const std::string eos = tok.eos() >= 0 ? tok.token_text(tok.eos()) : "";
  return ChatPrompt(ChatTemplate::parse(src), tok, bos, eos);
}

namespace {

// What the template's limits stop is the size of the conversation: a client's
// fault, which the server answers with a 4xx, not a 5xx.
bool is_limit(const ChatTemplateError& e) {
  const std::string& m = e.message();
  return m.find("evaluation steps") != std::string::npos || m.find("bytes exceeds the limit") != std::string::npos ||
         m.find("levels deep") != std::string::npos || m.find("macro calls nested") != std::string::npos ||
         m.find("too large") != std::string::npos;
}

}  // namespace

std::string ChatPrompt::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& tools) const {
  try {
    return tmpl_.render(chat_context(messages, add_generation_prompt, bos_, eos_, tools));
  } catch (const ChatTemplateError& e) {
    if (e.raised() || !is_limit(e)) throw;
    throw ChatTemplateError("the conversation is too large for the chat template: " + e.message(), e.line(),
                            e.column(), /*raised=*/true);
  }
}

std::vector<int32_t> ChatPrompt::tokenize(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json& tools, std::string* rendered,
                                          const std::string& reply_prefix) const {
  std::string text = render(messages, add_generation_prompt, tools);
  if (rendered) *rendered = text;
  text += reply_prefix;
  // Spans of the rendered text that are message content holding control-
  // token text. Contents appear in order; a template may trim them.
  const Specials& sp = *specials_;
  std::vector<std::pair<size_t, size_t>> spans;  // [begin, end), ascending
  size_t cursor = 0;
  if (messages.is_array()) {
    for (const auto& m : messages) {
      if (!m.is_object()) continue;
      auto c = m.find("content");
      if (c == m.end() || !c->is_string()) continue;
      std::string_view content = c->get_ref<const std::string&>();
      bool has_special = false;
      for (size_t i = 0; i < content.size() && !has_special; ++i) has_special = sp.match(content, i) >= 0;
      if (!has_special) continue;
      size_t at = text.find(content, cursor);
      if (at == std::string::npos) {
        const size_t b = content.find_first_not_of(" \t\r\n");
        const size_t e = content.find_last_not_of(" \t\r\n");
        if (b != std::string_view::npos) {
          content = content.substr(b, e + 1 - b);
          at = text.find(content, cursor);
        }
      }
      if (at == std::string::npos)
        throw ChatTemplateError("a message's content holds special-token text that the chat template rewrote; "
                                "remove it from the message",
                                0, 0, /*raised=*/true);
      spans.emplace_back(at, at + content.size());
      cursor = at + content.size();
    }
  }
  if (spans.empty()) return tok_->encode(text, /*add_special=*/false, /*parse_special=*/true);
  // Split where the template's own control tokens are, as encode() does, but
  // never inside a span; every piece between them is plain text.
  std::vector<int32_t> out;
  const std::string_view all(text);
  size_t piece = 0, s = 0;
  auto flush = [&](size_t end) {
    if (end > piece) {
      std::vector<int32_t> ids = tok_->encode(all.substr(piece, end - piece), false, /*parse_special=*/false);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  };
  for (size_t i = 0; i < all.size();) {
    while (s < spans.size() && spans[s].second <= i) ++s;
    if (s < spans.size() && i >= spans[s].first) {  // inside a span: skip it
      i = spans[s].second;
      continue;
    }
    int32_t id = sp.match(all, i);
    // Half template, half content is no control token either.
    if (id >= 0 && s < spans.size() && i + tok_->token_text(id).size() > spans[s].first) id = -1;
    if (id < 0) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(id);
    i += tok_->token_text(id).size();
    piece = i;
  }
  flush(all.size());
  return out;
}

}  // namespace kvad
