#include "hub/select.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string_view>

#include "base/error.h"

namespace kvad::hub {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string basename(const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// The name without ".gguf" and without a split suffix: the part a quant tag
// is read from.
std::string gguf_stem(const std::string& name) {
  GgufSplit sp;
  if (parse_gguf_split(name, sp)) return sp.prefix;
  return ends_with(name, ".gguf") ? name.substr(0, name.size() - 5) : name;
}

bool is_gguf(const std::string& name) {
  return ends_with(name, ".gguf") && !starts_with(basename(name), "mmproj");
}

// `tag` occurs in `stem` as a whole token: case-insensitive, preceded by the
// start, '/', '-', '_' or '.', and followed by the end, '-' or '.'.
bool token_match(const std::string& stem, const std::string& tag) {
  const std::string s = upper(stem), t = upper(tag);
  for (size_t pos = s.find(t); pos != std::string::npos; pos = s.find(t, pos + 1)) {
    const bool before = pos == 0 || std::string_view("/-_.").find(s[pos - 1]) != std::string_view::npos;
    const size_t end = pos + t.size();
    const bool after = end == s.size() || s[end] == '-' || s[end] == '.';
    if (before && after) return true;
  }
  return false;
}

// One loadable GGUF model in a file list: a single file or a split set.
struct GgufUnit {
  std::string entry;               // the single file, or part 1
  std::vector<std::string> parts;  // every part name the set needs
  int missing = 0;                 // parts of a split set not in the list
  std::string tag;                 // gguf_quant_tag(entry)
};

std::vector<GgufUnit> gguf_units(const std::vector<std::string>& files) {
  const std::set<std::string> have(files.begin(), files.end());
  std::map<std::string, GgufUnit> units;  // by prefix+count, sorted for stable messages
  for (const std::string& f : files) {
    if (!is_gguf(f)) continue;
    GgufSplit sp;
    GgufUnit u;
    std::string key;
    if (parse_gguf_split(f, sp)) {
      key = sp.prefix + "/" + std::to_string(sp.count);
      u.parts = gguf_split_names(sp.prefix, sp.count);
      u.entry = u.parts.front();
      for (const std::string& p : u.parts) u.missing += have.count(p) ? 0 : 1;
    } else {
      key = f;
      u.entry = f;
      u.parts = {f};
    }
    u.tag = gguf_quant_tag(u.entry);
    units.emplace(key, std::move(u));
  }
  std::vector<GgufUnit> out;
  for (auto& [k, u] : units) out.push_back(std::move(u));
  return out;
}

std::string list_tags(const std::vector<GgufUnit>& units) {
  std::string s;
  for (const GgufUnit& u : units) s += (s.empty() ? "" : ", ") + (u.tag.empty() ? u.entry : u.tag);
  return s;
}

Selection gguf_selection(const GgufUnit& u, const std::string& repo) {
  if (u.missing > 0)
    throw Error(repo + ": split GGUF " + u.entry + " lacks " + std::to_string(u.missing) + " of its " +
                std::to_string(u.parts.size()) + " parts");
  Selection s;
  s.kind = Selection::Kind::Gguf;
  s.files = u.parts;
  s.entry = u.entry;
  return s;
}

std::string list_files(const std::vector<std::string>& files) {
  std::string s;
  size_t n = 0;
  for (const std::string& f : files) {
    if (++n > 20) {
      s += ", ... (" + std::to_string(files.size()) + " files)";
      break;
    }
    s += (s.empty() ? "" : ", ") + f;
  }
  return s.empty() ? "(no files)" : s;
}

}  // namespace

bool parse_gguf_split(const std::string& name, GgufSplit& out) {
  // NAME-00001-of-00003.gguf: "-", 5 digits, "-of-", 5 digits, ".gguf".
  constexpr size_t kTail = 1 + 5 + 4 + 5 + 5;
  if (name.size() <= kTail || !ends_with(name, ".gguf")) return false;
  const std::string_view t = std::string_view(name).substr(name.size() - kTail);
  if (t[0] != '-' || t.substr(6, 4) != "-of-") return false;
  auto num = [](std::string_view d, int& v) {
    v = 0;
    for (char c : d) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    return true;
  };
  int idx = 0, cnt = 0;
  if (!num(t.substr(1, 5), idx) || !num(t.substr(10, 5), cnt)) return false;
  if (idx < 1 || cnt < 1 || idx > cnt) return false;
  out.prefix = name.substr(0, name.size() - kTail);
  out.index = idx;
  out.count = cnt;
  return true;
}

std::vector<std::string> gguf_split_names(const std::string& prefix, int count) {
  std::vector<std::string> names;
  for (int k = 1; k <= count; ++k) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", k, count);
    names.push_back(prefix + buf);
  }
  return names;
}

std::string gguf_quant_tag(const std::string& name) {
  // The ggml/llama.cpp file-type names as they appear in GGUF repo file
  // names (Q4_K_M, IQ2_XXS, Q8_0, BF16, TQ1_0, MXFP4_MOE, unsloth's UD-...).
  static const std::regex re(
      R"((?:^|[-._/])((?:UD-)?(?:I?Q[0-9]+(?:_[0-9A-Z]+)*|B?F16|F32|FP16|FP32|TQ[12]_0|MXFP4(?:_MOE)?))(?=$|[-.]))",
      std::regex::ECMAScript | std::regex::icase);
  const std::string stem = basename(gguf_stem(name));
  std::string tag;
  for (auto it = std::sregex_iterator(stem.begin(), stem.end(), re); it != std::sregex_iterator(); ++it)
    tag = (*it)[1].str();
  return upper(tag);
}

bool is_checkpoint_support_file(const std::string& name) {
  static const std::set<std::string> kNames = {
      "config.json",      "generation_config.json", "tokenizer.json",    "tokenizer_config.json",
      "special_tokens_map.json", "tokenizer.model", "vocab.json",        "merges.txt",
      "vocab.txt",        "added_tokens.json",      "chat_template.jinja", "chat_template.json"};
  return kNames.count(name) > 0;
}

const std::vector<std::string>& pipeline_components() {
  static const std::vector<std::string> kNames = {"unet",      "vae",         "text_encoder", "text_encoder_2",
                                                  "tokenizer", "tokenizer_2", "scheduler"};
  return kNames;
}

namespace {

// A weights file of a component folder: NAME[.VARIANT].safetensors or
// NAME.safetensors.index[.VARIANT].json; false for anything else (shards
// NAME-00001-of-00002[.VARIANT].safetensors included).
bool weights_variant(const std::string& f, std::string& variant, bool& index) {
  variant.clear();
  if (const size_t at = f.find(".safetensors.index"); at != std::string::npos && ends_with(f, ".json")) {
    index = true;
    const std::string rest = f.substr(at + 18);
    if (rest != ".json") variant = rest.substr(1, rest.size() - 6);
    return true;
  }
  if (!ends_with(f, ".safetensors")) return false;
  const size_t of = f.find("-of-");
  if (of != std::string::npos && of >= 6 && f[of - 6] == '-') return false;  // a shard
  index = false;
  const std::string stem = f.substr(0, f.size() - 12);
  if (const size_t dot = stem.rfind('.'); dot != std::string::npos) variant = stem.substr(dot + 1);
  return true;
}

bool is_shard_of(const std::string& shard, const std::string& index_name) {
  // NAME.safetensors.index[.V].json → NAME-0000k-of-0000n[.V].safetensors
  const std::string name = index_name.substr(0, index_name.find(".safetensors.index"));
  return starts_with(shard, name + "-") && ends_with(shard, ".safetensors") && shard.find("-of-") != std::string::npos;
}

bool is_tokenizer_file(const std::string& f) {
  return f == "vocab.json" || f == "merges.txt" || f == "tokenizer_config.json" || f == "special_tokens_map.json" ||
         f == "tokenizer.json" || f == "added_tokens.json";
}

}  // namespace

std::vector<std::string> pick_component_weights(const std::vector<std::string>& names, const std::string& variant) {
  auto of = [&](const std::string& v) {
    std::vector<std::string> idx, one;
    for (const std::string& f : names) {
      std::string fv;
      bool index = false;
      if (weights_variant(f, fv, index) && fv == v) (index ? idx : one).push_back(f);
    }
    return idx.empty() ? one : idx;
  };
  std::vector<std::string> pick = of(variant);
  if (pick.empty() && !variant.empty()) pick = of("");
  if (pick.empty() && variant.empty()) {
    std::set<std::string> variants;
    for (const std::string& f : names) {
      std::string fv;
      bool index = false;
      if (weights_variant(f, fv, index)) variants.insert(fv);
    }
    if (variants.size() == 1) pick = of(*variants.begin());
  }
  return pick;
}

namespace {

Selection pipeline_selection(const std::vector<std::string>& files, const std::string& variant, const std::string& repo) {
  Selection s;
  s.kind = Selection::Kind::Pipeline;
  s.files.push_back("model_index.json");
  for (const std::string& comp : pipeline_components()) {
    std::vector<std::string> names;
    for (const std::string& f : files)
      if (starts_with(f, comp + "/") && f.find('/', comp.size() + 1) == std::string::npos)
        names.push_back(f.substr(comp.size() + 1));
    if (names.empty()) continue;
    for (const std::string& n : names)
      if (n == "config.json" || n == "scheduler_config.json" || (starts_with(comp, "tokenizer") && is_tokenizer_file(n)))
        s.files.push_back(comp + "/" + n);
    if (comp == "scheduler" || starts_with(comp, "tokenizer")) continue;
    const std::vector<std::string> pick = pick_component_weights(names, variant);
    if (pick.size() != 1)
      throw Error(repo + ": " + comp + "/ has " + (pick.empty() ? "no .safetensors weights" : "several weights files") +
                  " for variant '" + variant + "' (has: " + list_files(names) + ")");
    s.files.push_back(comp + "/" + pick[0]);
    if (pick[0].find(".safetensors.index") != std::string::npos)
      for (const std::string& n : names)
        if (is_shard_of(n, pick[0])) s.files.push_back(comp + "/" + n);
  }
  std::sort(s.files.begin(), s.files.end());
  return s;
}

}  // namespace

Selection select_model_files(const std::vector<std::string>& files, const std::string& selector,
                             const std::string& repo) {
  const std::vector<GgufUnit> units = gguf_units(files);

  // A diffusers pipeline: "" or a variant its weights carry.
  if (std::find(files.begin(), files.end(), "model_index.json") != files.end() &&
      std::find(files.begin(), files.end(), selector) == files.end()) {
    if (selector.empty()) return pipeline_selection(files, "", repo);
    bool variant = selector.find_first_of("./") == std::string::npos;
    if (variant) {
      variant = false;
      for (const std::string& f : files) {
        std::string fv;
        bool index = false;
        if (weights_variant(basename(f), fv, index) && fv == selector) variant = true;
      }
    }
    if (variant) return pipeline_selection(files, selector, repo);
    if (selector.find_first_of("./") == std::string::npos)
      throw Error(repo + " is a diffusers pipeline without weights of variant '" + selector + "'");
  }

  if (selector.empty()) {
    std::vector<std::string> shards;
    bool has_other = false;
    for (const std::string& f : files)
      if (f.find('/') == std::string::npos && ends_with(f, ".safetensors")) {
        shards.push_back(f);
        has_other = has_other || !starts_with(f, "consolidated");
      }
    if (!shards.empty()) {
      Selection s;
      s.kind = Selection::Kind::Checkpoint;
      for (const std::string& f : shards)
        if (!has_other || !starts_with(f, "consolidated")) s.files.push_back(f);
      for (const std::string& f : files)
        if (is_checkpoint_support_file(f) || f == "model.safetensors.index.json") s.files.push_back(f);
      std::sort(s.files.begin(), s.files.end());
      return s;
    }
    if (units.empty())
      throw Error(repo + " has no model kvad can load: no *.safetensors at its root and no .gguf file (has: " +
                  list_files(files) + ")");
    for (const GgufUnit& u : units)
      if (u.tag == "Q4_K_M") return gguf_selection(u, repo);
    if (units.size() == 1) return gguf_selection(units.front(), repo);
    throw Error(repo + " has several GGUF models and no Q4_K_M: name one as " + repo + ":TAG (have: " +
                list_tags(units) + ")");
  }

  if (std::find(files.begin(), files.end(), selector) != files.end()) {
    GgufSplit sp;
    if (ends_with(selector, ".gguf")) {
      for (const GgufUnit& u : units)
        if (std::find(u.parts.begin(), u.parts.end(), selector) != u.parts.end()) return gguf_selection(u, repo);
      if (parse_gguf_split(selector, sp)) {  // an mmproj split set: no unit, but fetch it whole
        GgufUnit u;
        u.parts = gguf_split_names(sp.prefix, sp.count);
        u.entry = u.parts.front();
        for (const std::string& p : u.parts) u.missing += std::count(files.begin(), files.end(), p) ? 0 : 1;
        return gguf_selection(u, repo);
      }
      return gguf_selection(GgufUnit{selector, {selector}, 0, ""}, repo);
    }
    Selection s;
    s.kind = Selection::Kind::File;
    s.files = {selector};
    s.entry = selector;
    return s;
  }
  if (selector.find('.') != std::string::npos || selector.find('/') != std::string::npos)
    throw Error("no file '" + selector + "' in " + repo + " (has: " + list_files(files) + ")");

  const std::string want = upper(selector);
  std::vector<const GgufUnit*> exact, loose;
  for (const GgufUnit& u : units) {
    if (u.tag == want) exact.push_back(&u);
    else if (token_match(gguf_stem(u.entry), selector)) loose.push_back(&u);
  }
  const std::vector<const GgufUnit*>& hits = exact.empty() ? loose : exact;
  if (hits.size() == 1) return gguf_selection(*hits.front(), repo);
  if (hits.empty()) {
    if (units.empty()) throw Error(repo + " has no .gguf file for the quant tag '" + selector + "' to pick");
    throw Error("no GGUF with quant tag '" + selector + "' in " + repo + " (have: " + list_tags(units) + ")");
  }
  std::string names;
  for (const GgufUnit* u : hits) names += (names.empty() ? "" : ", ") + u->entry;
  throw Error("quant tag '" + selector + "' matches several files in " + repo + ": " + names +
              "; name the file as " + repo + ":FILE");
}

}  // namespace kvad::hub
