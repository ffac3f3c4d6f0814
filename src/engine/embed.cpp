#include "engine/embed.h"

#include <chrono>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/tensor_source.h"
#include "model/model.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Mean: return "mean";
    case Pooling::CLS: return "cls";
    case Pooling::Last: return "last";
  }
  return "?";
}

Pooling parse_pooling(const std::string& s) {
  if (s == "mean") return Pooling::Mean;
  if (s == "cls") return Pooling::CLS;
  if (s == "last") return Pooling::Last;
  throw Error("pooling '" + s + "' is not one of mean, cls, last");
}

namespace {

// A small JSON file; nullopt-like null when it does not exist.
json read_json(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return json();
  if (fs::file_size(p, ec) > (1u << 20)) throw Error(p.string() + ": larger than 1 MiB, not a config");
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(p.string() + ": invalid JSON: " + e.what());
  }
}

bool flag(const json& j, const fs::path& p, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean()) throw Error(p.string() + ": " + key + " is not true or false");
  return j[key].get<bool>();
}

// sentence-transformers' 1_Pooling/config.json.
Pooling read_pooling_config(const fs::path& p) {
  const json j = read_json(p);
  if (!j.is_object()) throw Error(p.string() + ": missing or not a JSON object");
  for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                  "pooling_mode_weightedmean_tokens"})
    if (flag(j, p, unsupported)) throw Error(p.string() + ": " + unsupported + " is not supported by kvad");
  if (j.contains("include_prompt") && j["include_prompt"].is_boolean() && !j["include_prompt"].get<bool>())
    throw Error(p.string() + ": include_prompt false is not supported by kvad");
  const bool cls = flag(j, p, "pooling_mode_cls_token"), mean = flag(j, p, "pooling_mode_mean_tokens"),
             last = flag(j, p, "pooling_mode_lasttoken");
  if (cls + mean + last != 1)
    throw Error(p.string() + ": exactly one of pooling_mode_cls_token, pooling_mode_mean_tokens, "
                "pooling_mode_lasttoken must be true (kvad does not concatenate poolings)");
  return cls ? Pooling::CLS : mean ? Pooling::Mean : Pooling::Last;
}

}  // namespace

EmbeddingConfig embedding_config(const Model& m, const std::string& dir) {
  EmbeddingConfig c;
  const HParams& hp = m.hparams();
  c.max_seq_length = static_cast<int32_t>(std::min<int64_t>(hp.n_ctx_train > 0 ? hp.n_ctx_train : 512, 512));
  c.pooling = model_kind(m) == ModelKind::Embedding ? Pooling::Mean : Pooling::Last;
  c.normalize = true;
  c.source = "defaults for kind " + std::string(model_kind_name(model_kind(m)));
  const std::string key = hp.arch + ".pooling_type";
  if (m.source().has(key)) {
    const int64_t t = m.source().get_int(key, 0);
    if (t < 1 || t > 3)
      throw Error(m.source().path() + ": " + key + " " + std::to_string(t) + " is not mean (1), cls (2) or last (3)");
    c.pooling = t == 1 ? Pooling::Mean : t == 2 ? Pooling::CLS : Pooling::Last;
    c.source = key;
  }
  if (dir.empty()) return c;
  const fs::path root(dir);
  const json modules = read_json(root / "modules.json");
  if (modules.is_null()) return c;
  const std::string mp = (root / "modules.json").string();
  if (!modules.is_array()) throw Error(mp + ": not a JSON array");
  bool pooled = false;
  c.normalize = false;
  for (const json& mod : modules) {
    if (!mod.is_object() || !mod.contains("type") || !mod["type"].is_string())
      throw Error(mp + ": a module without a type string");
    const std::string type = mod["type"].get<std::string>();
    const std::string path = mod.contains("path") && mod["path"].is_string() ? mod["path"].get<std::string>() : "";
    if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/'))
      throw Error(mp + ": module path '" + path + "' leaves the checkpoint");
    if (type == "sentence_transformers.models.Transformer") {
      const json sb = read_json(root / path / "sentence_bert_config.json");
      if (sb.is_object() && sb.contains("max_seq_length") && sb["max_seq_length"].is_number_integer()) {
        const int64_t n = sb["max_seq_length"].get<int64_t>();
        if (n < 1 || n > hp.n_ctx_train)
          throw Error((root / path / "sentence_bert_config.json").string() + ": max_seq_length " + std::to_string(n) +
                      " is outside [1, " + std::to_string(hp.n_ctx_train) + "]");
        c.max_seq_length = static_cast<int32_t>(n);
      }
    } else if (type == "sentence_transformers.models.Pooling") {
      c.pooling = read_pooling_config(root / path / "config.json");
      pooled = true;
    } else if (type == "sentence_transformers.models.Normalize") {
      c.normalize = true;
    } else {
      throw Error(mp + ": module " + type + " is not supported by kvad (it applies Transformer, Pooling, Normalize)");
    }
  }
  if (!pooled) throw Error(mp + ": lists no sentence_transformers.models.Pooling module");
  c.source = mp;
  return c;
}

Embedder::Embedder(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tok, EmbeddingConfig cfg,
                   int n_threads)
    : model_(std::move(model)), tok_(std::move(tok)), cfg_(std::move(cfg)) {
  const HParams& hp = model_->hparams();
  if (cfg_.max_seq_length < 1 || cfg_.max_seq_length > std::max<int64_t>(1, hp.n_ctx_train))
    throw Error("embeddings: max_seq_length " + std::to_string(cfg_.max_seq_length) + " does not fit the model's " +
                std::to_string(hp.n_ctx_train) + " positions");
  // A forward call holds whole sequences: at least one of the longest, and
  // up to 2048 tokens (activations of ~25 KiB per token for MiniLM, ~50 MiB).
  n_batch_ = std::max<int64_t>(cfg_.max_seq_length, 2048);
  n_seq_ = 64;
  pool_ = std::make_unique<ThreadPool>(n_threads);
  cache_ = model_->new_cache(cfg_.max_seq_length, n_seq_, n_batch_);
  // Where the tokenizer's specials go around a text ("[CLS] a [SEP]"), so
  // that truncation keeps them as HF tokenizers' does.
  const std::vector<int32_t> full = tok_->encode("a", true, true), plain = tok_->encode("a", false, true);
  auto it = std::search(full.begin(), full.end(), plain.begin(), plain.end());
  if (!plain.empty() && it != full.end()) {
    n_prefix_ = static_cast<size_t>(it - full.begin());
    n_suffix_ = full.size() - n_prefix_ - plain.size();
  }
  if (static_cast<int64_t>(n_prefix_ + n_suffix_) >= cfg_.max_seq_length)
    throw Error("embeddings: max_seq_length " + std::to_string(cfg_.max_seq_length) + " leaves no room past " +
                std::to_string(n_prefix_ + n_suffix_) + " special tokens");
}

Embedder::~Embedder() = default;

int64_t Embedder::dim() const { return model_->hparams().n_embd; }
int32_t Embedder::n_vocab() const { return static_cast<int32_t>(model_->hparams().n_vocab); }

std::vector<int32_t> Embedder::tokenize(std::string_view text) const {
  std::vector<int32_t> ids = tok_->encode(text, true, true);
  const size_t max = static_cast<size_t>(cfg_.max_seq_length);
  if (ids.size() <= max) return ids;
  // Keep the prefix specials, the first (max - specials) text tokens, the suffix specials.
  std::vector<int32_t> out(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(max - n_suffix_));
  out.insert(out.end(), ids.end() - static_cast<std::ptrdiff_t>(n_suffix_), ids.end());
  return out;
}

std::vector<float> Embedder::embed(const std::vector<std::vector<int32_t>>& inputs,
                                   const std::function<bool()>& cancelled) {
  const int32_t nv = n_vocab();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    if (in.empty()) throw Error("embeddings: input " + std::to_string(i) + " has no tokens");
    if (static_cast<int64_t>(in.size()) > cfg_.max_seq_length)
      throw Error("embeddings: input " + std::to_string(i) + " has " + std::to_string(in.size()) +
                  " tokens, more than max_seq_length " + std::to_string(cfg_.max_seq_length));
    for (int32_t id : in)
      if (id < 0 || id >= nv)
        throw Error("embeddings: input " + std::to_string(i) + ": token id " + std::to_string(id) +
                    " is not in the vocabulary (" + std::to_string(nv) + " tokens)");
  }
  const int64_t E = dim();
  std::vector<float> result(inputs.size() * static_cast<size_t>(E), 0.0f);
  // One turn per forward call (the cache and the pool are shared); the
  // waiting call with the fewest tokens left goes next (ties: the earlier),
  // so a short request waits for the forward call in progress only.
  // Released on every exit, a throw included.
  struct Turn {
    Embedder& e;
    std::pair<int64_t, uint64_t> key;
    bool others_waiting = false;
    // A call cancelled while it waits leaves the line (checked every 50 ms).
    Turn(Embedder& em, int64_t tokens_left, const std::function<bool()>& cancelled) : e(em) {
      std::unique_lock<std::mutex> l(e.mu_);
      key = {tokens_left, e.next_ticket_++};
      e.waiting_.insert(key);
      while (!e.turn_.wait_for(l, std::chrono::milliseconds(50),
                               [&] { return !e.busy_ && *e.waiting_.begin() == key; })) {
        l.unlock();
        const bool gone = cancelled && cancelled();
        l.lock();
        if (gone) {
          e.waiting_.erase(key);
          l.unlock();
          e.turn_.notify_all();
          throw EmbedCancelled();
        }
      }
      e.waiting_.erase(key);
      e.busy_ = true;
      others_waiting = !e.waiting_.empty();
    }
    ~Turn() {
      {
        std::lock_guard<std::mutex> l(e.mu_);
        e.busy_ = false;
      }
      e.turn_.notify_all();
    }
  };
  int64_t tokens_left = 0;
  for (const auto& in : inputs) tokens_left += static_cast<int64_t>(in.size());
  std::vector<int32_t> token, pos, seq, out;
  std::vector<float> hidden;
  for (size_t i0 = 0; i0 < inputs.size();) {
    const Turn turn(*this, tokens_left, cancelled);
    if (cancelled && cancelled()) throw EmbedCancelled();
    // Pack whole sequences into one call; shorter calls while others wait
    // (each waits for the call in progress).
    const int64_t cap = turn.others_waiting ? std::min<int64_t>(n_batch_, kSharedBatchTokens) : n_batch_;
    size_t i1 = i0;
    int64_t n_tok = 0;
    while (i1 < inputs.size() && static_cast<int>(i1 - i0) < n_seq_ &&
           (i1 == i0 || n_tok + static_cast<int64_t>(inputs[i1].size()) <= cap))
      n_tok += static_cast<int64_t>(inputs[i1++].size());
    tokens_left -= n_tok;
    token.clear(), pos.clear(), seq.clear(), out.clear();
    for (size_t i = i0; i < i1; ++i) {
      const auto& in = inputs[i];
      const int32_t s = static_cast<int32_t>(i - i0), n = static_cast<int32_t>(in.size());
      const int32_t row0 = static_cast<int32_t>(token.size());
      for (int32_t p = 0; p < n; ++p) {
        token.push_back(in[p]);
        pos.push_back(p);
        seq.push_back(s);
      }
      if (cfg_.pooling == Pooling::Mean)
        for (int32_t p = 0; p < n; ++p) out.push_back(row0 + p);
      else
        out.push_back(cfg_.pooling == Pooling::CLS ? row0 : row0 + n - 1);
    }
    hidden.resize(out.size() * static_cast<size_t>(E));
    BatchView b{token.data(), pos.data(), seq.data(), static_cast<int64_t>(token.size()), out.data(),
                static_cast<int64_t>(out.size())};
    for (size_t i = i0; i < i1; ++i) cache_->truncate(static_cast<int>(i - i0), 0);
    model_->hidden(*pool_, *cache_, b, hidden.data());
    ++forward_calls_;
    for (size_t i = i0; i < i1; ++i) cache_->truncate(static_cast<int>(i - i0), 0);
    // Pool: hidden rows are in `out` order, sequence by sequence.
    size_t row = 0;
    for (size_t i = i0; i < i1; ++i) {
      float* v = result.data() + i * static_cast<size_t>(E);
      const size_t rows = cfg_.pooling == Pooling::Mean ? inputs[i].size() : 1;
      std::vector<double> acc(static_cast<size_t>(E), 0.0);
      for (size_t r = 0; r < rows; ++r, ++row)
        for (int64_t e = 0; e < E; ++e) acc[e] += hidden[row * E + e];
      double norm2 = 0;
      for (int64_t e = 0; e < E; ++e) {
        acc[e] /= static_cast<double>(rows);
        norm2 += acc[e] * acc[e];
      }
      const double scale = cfg_.normalize ? 1.0 / std::max(std::sqrt(norm2), 1e-12) : 1.0;
      for (int64_t e = 0; e < E; ++e) v[e] = static_cast<float>(acc[e] * scale);
    }
    i0 = i1;
  }
  return result;
}

}  // namespace kvad
