#include "tokenizer/clip.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "tokenizer/clip_vocab.h"

namespace kvad {

namespace clip_detail {
std::string basic_clean(std::string_view text);  // clip_basic_clean.cpp
}

namespace {

using json = nlohmann::json;

constexpr size_t kMaxFileBytes = size_t{128} << 20;

std::string read_file(const std::filesystem::path& p, bool required) {
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) {
    if (required) throw Error(p.string() + ": missing (a CLIP tokenizer folder holds vocab.json and merges.txt)");
    return {};
  }
  const auto size = std::filesystem::file_size(p, ec);
  if (ec) throw Error(p.string() + ": cannot read: " + ec.message());
  if (size > kMaxFileBytes) throw Error(p.string() + ": " + std::to_string(size) + " bytes is over 128 MiB");
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse(std::string_view text, const std::string& name) {
  if (text.size() > kMaxFileBytes) throw Error(name + ": over 128 MiB");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(name + ": not valid JSON: " + e.what());
  }
}

// One special-token attribute: a string (an AddedToken with normalized=False,
// transformers' default for special tokens) or an AddedToken object.
struct Special {
  std::string content;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

Special special_from(const json& v, const std::string& where) {
  Special s;
  if (v.is_string()) {
    s.content = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    s.content = v["content"].get<std::string>();
    auto flag = [&](const char* k, bool def) {
      auto it = v.find(k);
      if (it == v.end() || it->is_null()) return def;
      if (!it->is_boolean()) throw Error(where + ": \"" + k + "\" is not true or false");
      return it->get<bool>();
    };
    s.lstrip = flag("lstrip", false);
    s.rstrip = flag("rstrip", false);
    s.single_word = flag("single_word", false);
    s.normalized = flag("normalized", false);
  } else {
    throw Error(where + ": expected a token string or an AddedToken object, got " + v.dump().substr(0, 80));
  }
  if (s.content.empty()) throw Error(where + ": an empty special token");
  return s;
}

}  // namespace

ClipTokenizer ClipTokenizer::from_folder(const std::string& dir, ClipCleaning cleaning) {
  const std::filesystem::path d(dir);
  return from_texts(read_file(d / "vocab.json", true), read_file(d / "merges.txt", true),
                    read_file(d / "tokenizer_config.json", false), read_file(d / "special_tokens_map.json", false),
                    dir, cleaning);
}

ClipTokenizer ClipTokenizer::builtin(std::string_view pad_token, ClipCleaning cleaning) {
  const ClipVocabTexts v = builtin_clip_vocab();
  // openai/clip-vit-large-patch14's tokenizer_config.json (the pad token a
  // plain string, as there).
  auto added = [](const char* content) {
    return nlohmann::json{{"content", content}, {"lstrip", false}, {"normalized", true},
                          {"rstrip", false},    {"single_word", false}};
  };
  const nlohmann::json config = {{"bos_token", added("<|startoftext|>")},
                                 {"eos_token", added("<|endoftext|>")},
                                 {"unk_token", added("<|endoftext|>")},
                                 {"pad_token", std::string(pad_token)},
                                 {"model_max_length", 77}};
  return from_texts(v.vocab_json, v.merges_txt, config.dump(), {}, "kvad's built-in CLIP vocabulary", cleaning);
}

ClipTokenizer ClipTokenizer::from_texts(std::string_view vocab_text, std::string_view merges_text,
                                        std::string_view config_text, std::string_view map_text,
                                        const std::string& name, ClipCleaning cleaning) {
  const std::string vocab_name = name + "/vocab.json", merges_name = name + "/merges.txt";
  const std::string config_name = name + "/tokenizer_config.json", map_name = name + "/special_tokens_map.json";
  json vocab = parse(vocab_text, vocab_name);
  if (!vocab.is_object() || vocab.empty()) throw Error(vocab_name + ": expected a non-empty object of token -> id");
  for (const auto& [tok, id] : vocab.items())
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 22))
      throw Error(vocab_name + ": the id of \"" + tok + "\" is not an integer in [0, 2^22)");

  // merges.txt: an optional "#version" line, then "left right" per line.
  json merges = json::array();
  if (merges_text.size() > kMaxFileBytes) throw Error(merges_name + ": over 128 MiB");
  size_t line_no = 0;
  for (size_t at = 0; at < merges_text.size();) {
    size_t end = merges_text.find('\n', at);
    if (end == std::string_view::npos) end = merges_text.size();
    std::string_view line = merges_text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string_view::npos)
      throw Error(merges_name + ":" + std::to_string(line_no) + ": expected two tokens separated by one space");
    merges.push_back(json::array({std::string(line.substr(0, sp)), std::string(line.substr(sp + 1))}));
  }

  const json config = config_text.empty() ? json::object() : parse(config_text, config_name);
  const json map = map_text.empty() ? json::object() : parse(map_text, map_name);
  if (!config.is_object()) throw Error(config_name + ": the top level is not an object");
  if (!map.is_object()) throw Error(map_name + ": the top level is not an object");

  // The special-token attributes in transformers' order; a later one naming
  // the same text sets its flags. Defaults: CLIPTokenizer's.
  const std::pair<const char*, const char*> attrs[] = {
      {"bos_token", "<|startoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"},
      {"pad_token", "<|endoftext|>"}};
  std::map<std::string, Special> specials;  // by content
  std::map<std::string, std::string> attr_content;
  for (const auto& [attr, def] : attrs) {
    Special s;
    if (config.contains(attr) && !config[attr].is_null())
      s = special_from(config[attr], config_name + ": \"" + attr + "\"");
    else if (map.contains(attr) && !map[attr].is_null())
      s = special_from(map[attr], map_name + ": \"" + attr + "\"");
    else
      s.content = def;
    if (!vocab.contains(s.content))
      throw Error(name + ": " + attr + " \"" + s.content + "\" is not in vocab.json");
    attr_content[attr] = s.content;
    specials[s.content] = s;
  }
  ClipTokenizer t;
  if (auto it = config.find("model_max_length"); it != config.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() >= 2 && it->get<double>() <= 4096))
      throw Error(config_name + ": \"model_max_length\" " + it->dump() + " is not in 2..4096");
    t.max_length_ = static_cast<int>(it->get<double>());
  }

  json added = json::array();
  std::map<int64_t, json> by_id;
  for (const auto& [content, s] : specials)
    by_id[vocab[content].get<int64_t>()] = {{"id", vocab[content]},       {"content", content},
                                            {"single_word", s.single_word}, {"lstrip", s.lstrip},
                                            {"rstrip", s.rstrip},
                                            // The slow tokenizer matches special tokens in the raw text.
                                            {"normalized", cleaning == ClipCleaning::Basic ? false : s.normalized},
                                            {"special", true}};
  for (auto& [id, a] : by_id) added.push_back(std::move(a));
  const std::string& bos = attr_content["bos_token"];
  const std::string& eos = attr_content["eos_token"];
  json tj = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      // Basic: encode() cleans each piece between special tokens itself (clip_basic_clean.cpp).
      {"normalizer", cleaning == ClipCleaning::Basic
                         ? json(nullptr)
                         : json{{"type", "Sequence"},
                                {"normalizers",
                                 json::array({{{"type", "NFC"}},
                                              {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
                                              {{"type", "Lowercase"}}})}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"},
                       {"pattern",
                        {{"Regex", "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|"
                                   "[^\\s\\p{L}\\p{N}]+"}}},
                       {"behavior", "Removed"},
                       {"invert", true}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}})}}},
      {"post_processor",
       {{"type", "RobertaProcessing"},
        {"sep", json::array({eos, vocab[eos]})},
        {"cls", json::array({bos, vocab[bos]})},
        {"trim_offsets", false},
        {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", attr_content["unk_token"]},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", "</w>"},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}},
  };
  t.tok_ = Tokenizer::from_tokenizer_json_text(tj.dump(), name + " (vocab.json + merges.txt)");
  const json& v = tj["model"]["vocab"];
  t.bos_ = v[bos].get<int32_t>();
  t.eos_ = v[eos].get<int32_t>();
  t.pad_ = v[attr_content["pad_token"]].get<int32_t>();
  t.cleaning_ = cleaning;
  for (const auto& [content, sp] : specials) t.specials_.emplace_back(content, v[content].get<int32_t>());
  std::sort(t.specials_.begin(), t.specials_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return t;
}

std::vector<int32_t> ClipTokenizer::body(std::string_view text) const {
  if (cleaning_ == ClipCleaning::Tokenizers) return tok_->encode(text, /*add_special=*/false, /*parse_special=*/true);
  // The slow tokenizer: split on special tokens in the raw text (leftmost,
  // longest), clean and tokenize each piece between them.
  std::vector<int32_t> ids;
  auto piece = [&](std::string_view p) {
    if (p.empty()) return;
    const std::string clean = clip_detail::basic_clean(p);
    if (clean.empty()) return;
    const std::vector<int32_t> e = tok_->encode(clean, false, false);
    ids.insert(ids.end(), e.begin(), e.end());
  };
  size_t seg = 0;
  for (size_t i = 0; i < text.size();) {
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& sp : specials_)
      if (text.substr(i).starts_with(sp.first)) {
        hit = &sp;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    piece(text.substr(seg, i - seg));
    ids.push_back(hit->second);
    i += hit->first.size();
    seg = i;
  }
  piece(text.substr(seg));
  return ids;
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view text) const {
  if (cleaning_ == ClipCleaning::Tokenizers) return tok_->encode(text, /*add_special=*/true, /*parse_special=*/true);
  std::vector<int32_t> ids = body(text);
  ids.insert(ids.begin(), bos_);
  ids.push_back(eos_);
  return ids;
}

std::vector<int32_t> ClipTokenizer::encode_padded(std::string_view text) const {
  std::vector<int32_t> body = this->body(text);
  const auto keep = static_cast<size_t>(max_length_ - 2);
  if (body.size() > keep) body.resize(keep);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(max_length_));
  ids.push_back(bos_);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.push_back(eos_);
  ids.resize(static_cast<size_t>(max_length_), pad_);
  return ids;
}

}  // namespace kvad
