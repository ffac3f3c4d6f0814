// T5's tokenizer (t5.h). Source: transformers 5 models/t5/tokenization_t5.py
// (T5Tokenizer.__init__), tokenization_utils_tokenizers.py
// (_convert_from_sentencepiece) and convert_slow_tokenizer.py
// (T5Converter.convert_from_spm: the extra ids after the pieces, last first);
// diffusers pipelines/flux/pipeline_flux.py (_get_t5_prompt_embeds).
#include "tokenizer/t5.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/spiece_model.h"

namespace kvad {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::unique_ptr<Tokenizer> t5_tokenizer_from_spiece(const tok::SpieceModel& m, const std::string& name,
                                                    int extra_ids) {
  if (m.model_type != 1)
    throw Error(name + ": TrainerSpec.model_type " + std::to_string(m.model_type) +
                " is not UNIGRAM (1), which T5's tokenizer is");
  if (extra_ids < 0 || extra_ids > 10000) throw Error(name + ": extra_ids " + std::to_string(extra_ids) + " is not 0..10000");
  if (!m.precompiled_charsmap.empty()) tok::PrecompiledCharsmap check(m.precompiled_charsmap, name);  // errors early
  json vocab = json::array(), added = json::array();
  auto special = [&](int64_t id, const std::string& text) {
    added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  };
  int64_t eos = -1;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const tok::SpieceModel::Piece& p = m.pieces[i];
    vocab.push_back({p.piece, static_cast<double>(p.score)});
    if (p.type == 2 || p.type == 3) special(static_cast<int64_t>(i), p.piece);  // UNKNOWN, CONTROL
    if (p.piece == "</s>" && eos < 0) eos = static_cast<int64_t>(i);
  }
  if (eos < 0) throw Error(name + ": no </s> piece (T5's end of sequence)");
  const int64_t n = static_cast<int64_t>(m.pieces.size());
  for (int i = extra_ids - 1; i >= 0; --i) {
    const std::string t = "<extra_id_" + std::to_string(i) + ">";
    vocab.push_back({t, 0.0});
    special(n + (extra_ids - 1 - i), t);
  }
  const std::string scheme = m.add_dummy_prefix ? "always" : "never";
  json meta = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", true}};
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", m.precompiled_charsmap.empty()
                         ? json(nullptr)
                         : json{{"type", "Precompiled"},
                                {"precompiled_charsmap", tok::base64_encode(m.precompiled_charsmap)}}},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "WhitespaceSplit"}}, meta})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", json::array({eos})}, {"tokens", json::array({"</s>"})}}}}}}},
      {"decoder", meta},
      {"model", {{"type", "Unigram"}, {"vocab", vocab}, {"byte_fallback", m.byte_fallback}}},
  };
  if (m.unk_id >= 0) j["model"]["unk_id"] = m.unk_id;
  // transformers' T5Tokenizer: eos </s>, pad <pad>, unk <unk> (those the model has).
  json cfg = {{"eos_token", "</s>"}};
  for (const tok::SpieceModel::Piece& p : m.pieces) {
    if (p.piece == "<unk>") cfg["unk_token"] = "<unk>";
    if (p.piece == "<pad>") cfg["pad_token"] = "<pad>";
  }
  return Tokenizer::from_tokenizer_json_text(j.dump(), name, cfg.dump(), name + " (T5Tokenizer's special tokens)");
}

std::unique_ptr<Tokenizer> t5_tokenizer(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (fs::is_regular_file(d / "tokenizer.json", ec)) {
    const fs::path cfg = d / "tokenizer_config.json";
    return Tokenizer::from_tokenizer_json((d / "tokenizer.json").string(),
                                          fs::is_regular_file(cfg, ec) ? cfg.string() : std::string());
  }
  if (fs::is_regular_file(d / "spiece.model", ec)) {
    const std::string p = (d / "spiece.model").string();
    return t5_tokenizer_from_spiece(tok::read_spiece_model(p), p);
  }
  throw Error(dir + ": no tokenizer.json or spiece.model (not a T5 tokenizer folder)");
}

std::vector<int32_t> t5_prompt_ids(const Tokenizer& tok, std::string_view prompt, int64_t max_sequence_length) {
  if (max_sequence_length < 1 || max_sequence_length > (int64_t{1} << 16))
    throw Error("max_sequence_length " + std::to_string(max_sequence_length) + " is not 1..65536");
  const std::optional<int32_t> eos = tok.find_token("</s>"), pad = tok.find_token("<pad>");
  if (!eos || !pad) throw Error("the T5 tokenizer has no </s> or no <pad> token");
  std::vector<int32_t> ids = tok.encode(prompt, false, true);
  // tokenizers' truncation leaves room for what the post-processor adds ($A </s>).
  if (static_cast<int64_t>(ids.size()) > max_sequence_length - 1) ids.resize(static_cast<size_t>(max_sequence_length - 1));
  ids.push_back(*eos);
  ids.resize(static_cast<size_t>(max_sequence_length), *pad);
  return ids;
}

}  // namespace kvad
