// The fill-in-the-middle side of llama.cpp's endpoints (llamacpp_api.h):
// a model's FIM tokens from its GGUF keys or vocabulary, the /infill
// prompt, and /tokenize's pieces. Apart from llamacpp_api.cpp so that the
// request parser builds without the tokenizer and the GGUF reader (the
// fuzz target).
#include <optional>

#include "base/utf8.h"
#include "io/gguf.h"
#include "server/llamacpp_api.h"
#include "tokenizer/tokenizer.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

/// The first of `texts` that is a token of `tok`, or -1.
int32_t find_any(const Tokenizer& tok, std::initializer_list<const char*> texts) {
  for (const char* t : texts)
    if (std::optional<int32_t> id = tok.find_token(t)) return *id;
  return -1;
}

/// A token id from GGUF key `key` when present and in the vocabulary, else -1.
int32_t from_key(const gguf::File* f, const Tokenizer& tok, const char* key) {
  if (!f) return -1;
  const gguf::Value* v = f->find(key);
  if (!v) return -1;
  try {
    const int64_t id = v->as_int();
    return id >= 0 && id < tok.n_vocab() ? static_cast<int32_t>(id) : -1;
  } catch (const std::exception&) {
    return -1;  // a key of the wrong type: as if absent
  }
}

}  // namespace

FimTokens find_fim_tokens(const gguf::File* f, const Tokenizer& tok) {
  auto pick = [&](std::initializer_list<const char*> keys, std::initializer_list<const char*> texts) {
    for (const char* k : keys)
      if (int32_t id = from_key(f, tok, k); id >= 0) return id;
    return find_any(tok, texts);
  };
  FimTokens t;
  t.pre = pick({"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
               {"<|fim_prefix|>", "<fim_prefix>", "<fim-prefix>", "<PRE>", "\xe2\x96\x81<PRE>",
                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<|fim_begin|>"});
  t.suf = pick({"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
               {"<|fim_suffix|>", "<fim_suffix>", "<fim-suffix>", "<SUF>", "\xe2\x96\x81<SUF>",
                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<|fim_hole|>"});
  t.mid = pick({"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
               {"<|fim_middle|>", "<fim_middle>", "<fim-middle>", "<MID>", "\xe2\x96\x81<MID>",
                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<|fim_end|>"});
  t.pad = pick({"tokenizer.ggml.fim_pad_token_id"}, {"<|fim_pad|>", "<fim_pad>", "<fim-pad>"});
  t.rep = pick({"tokenizer.ggml.fim_rep_token_id"}, {"<|repo_name|>", "<repo_name>", "<reponame>"});
  t.sep = pick({"tokenizer.ggml.fim_sep_token_id"}, {"<|file_sep|>", "<file_sep>"});
  return t;
}

std::vector<int32_t> infill_prompt(const Tokenizer& tok, const FimTokens& fim, const std::string& model_id,
                                   const std::string& prefix, const std::string& suffix,
                                   const std::vector<InfillChunk>& extra, const std::string& prompt, int32_t n_ctx,
                                   size_t max_token_bytes) {
  if (!fim.ok())
    throw ApiError(400, "The model '" + model_id + "' has no fill-in-the-middle tokens (no tokenizer.ggml.fim_pre/"
                   "fim_suf/fim_mid_token_id keys and no <|fim_prefix|>, <fim_prefix> or <PRE> tokens), so it "
                   "cannot infill; use a code model such as Qwen2.5-Coder, StarCoder or CodeLlama.",
                   "invalid_request_error", "model", "model_not_supported");
  size_t bytes = prefix.size() + suffix.size() + prompt.size();
  for (const InfillChunk& c : extra) bytes += c.filename.size() + c.text.size() + 1;
  if (bytes > static_cast<uint64_t>(n_ctx) * max_token_bytes * 2)
    throw ApiError(400, "The infill text (" + std::to_string(bytes) + " bytes) cannot fit the context of " +
                            std::to_string(n_ctx) + " tokens.", "invalid_request_error", "input_prefix",
                   "context_length_exceeded");
  auto text = [&](const std::string& s) { return tok.encode(s, /*add_special=*/false, /*parse_special=*/false); };
  std::vector<int32_t> ids;
  auto add = [&](const std::vector<int32_t>& v) { ids.insert(ids.end(), v.begin(), v.end()); };
  if (tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
  if (!extra.empty()) {
    if (fim.rep >= 0 && fim.sep >= 0) {
      ids.push_back(fim.rep);
      add(text("myproject\n"));
      for (const InfillChunk& c : extra) {
        ids.push_back(fim.sep);
        add(text(c.filename + "\n" + c.text));
      }
    } else {
      for (const InfillChunk& c : extra) add(text(c.text));
    }
  }
  ids.push_back(fim.pre);
  add(text(prefix));
  ids.push_back(fim.suf);
  add(text(suffix));
  ids.push_back(fim.mid);
  add(text(prompt));
  return ids;
}

json llamacpp_piece(const std::string& piece) {
  std::string back;
  for (size_t i = 0; i < piece.size();) utf8::append(back, utf8::decode(piece, i));
  if (back == piece) return piece;
  json b = json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace kvad::server
