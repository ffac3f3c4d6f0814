#include "hub/cache.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace fs = std::filesystem;

namespace kvad::hub {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// os.path.expanduser for "~" and "~/...": huggingface_hub expands both in
// HF_HOME and HF_HUB_CACHE.
std::string expand_user(const std::string& p) {
  if (p == "~" || p.rfind("~/", 0) == 0) {
    const std::string home = env("HOME");
    if (!home.empty()) return home + p.substr(1);
  }
  return p;
}

std::string read_small_file(const fs::path& p, size_t limit) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error("cannot read " + p.string());
  std::string s(limit + 1, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  if (s.size() > limit) throw Error(p.string() + ": larger than " + std::to_string(limit) + " bytes");
  return s;
}

// For a checkpoint: config.json and every shard the index names must be
// there. An index is the checkpoint's own table of contents; without one,
// the *.safetensors files present are the checkpoint.
bool checkpoint_complete(const fs::path& snap, const std::vector<std::string>& files, std::string& why) {
  const std::set<std::string> have(files.begin(), files.end());
  if (!have.count("config.json")) {
    why = "config.json is missing from " + snap.string();
    return false;
  }
  if (!have.count("model.safetensors.index.json")) return true;
  const fs::path index = snap / "model.safetensors.index.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_small_file(index, 64u << 20));
  } catch (const nlohmann::json::exception& e) {
    throw Error(index.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(index.string() + ": no \"weight_map\" object");
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) throw Error(index.string() + ": weight_map[\"" + tensor + "\"] is not a string");
    const std::string name = shard.get<std::string>();
    validate_repo_filename(name, index.string() + ": shard name");
    if (!have.count(name)) {
      why = "shard " + name + " (named in model.safetensors.index.json) is missing from " + snap.string();
      return false;
    }
  }
  return true;
}

}  // namespace

bool env_true(const char* name) {
  std::string v = env(name);
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string hf_home() {
  if (std::string h = env("HF_HOME"); !h.empty()) return expand_user(h);
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return expand_user(x) + "/huggingface";
  const std::string home = env("HOME");
  return (home.empty() ? std::string(".") : home) + "/.cache/huggingface";
}

std::string hf_hub_cache_dir() {
  if (std::string c = env("HF_HUB_CACHE"); !c.empty()) return expand_user(c);
  if (std::string c = env("HUGGINGFACE_HUB_CACHE"); !c.empty()) return expand_user(c);
  return hf_home() + "/hub";
}

std::string repo_cache_dir(const std::string& cache_dir, const std::string& repo_id) {
  return (fs::path(cache_dir) / repo_folder_name(repo_id)).string();
}

std::string cached_commit(const std::string& repo_dir, const std::string& revision) {
  if (is_commit_hash(revision)) return revision;
  const fs::path ref = fs::path(repo_dir) / "refs" / revision;
  std::error_code ec;
  if (!fs::is_regular_file(ref, ec)) return "";
  std::string commit = read_small_file(ref, 4096);
  // huggingface_hub writes the hash alone; tolerate a newline from a hand edit.
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
  if (!is_commit_hash(commit)) throw Error(ref.string() + ": does not hold a commit hash");
  return commit;
}

std::vector<std::string> snapshot_files(const std::string& snapshot_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path root(snapshot_dir);
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (!fs::is_regular_file(it->path(), ec2)) continue;  // folders, broken links
    out.push_back(it->path().lexically_relative(root).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<Resolved> resolve_hf(const RepoSpec& spec, const std::string& cache_dir, std::string* why_not) {
  auto no = [&](const std::string& why) -> std::optional<Resolved> {
    if (why_not) *why_not = why;
    return std::nullopt;
  };
  validate_repo_id(spec.repo);
  validate_revision(spec.revision);
  const std::string repo_dir = repo_cache_dir(cache_dir, spec.repo);
  std::error_code ec;
  if (!fs::is_directory(repo_dir, ec)) return no(spec.repo + " is not in the HF cache " + cache_dir);
  Resolved r;
  r.commit = cached_commit(repo_dir, spec.revision);
  if (r.commit.empty()) return no("no refs/" + spec.revision + " in " + repo_dir);
  r.snapshot_dir = (fs::path(repo_dir) / "snapshots" / r.commit).string();
  if (!fs::is_directory(r.snapshot_dir, ec)) return no("no snapshot " + r.commit + " in " + repo_dir);
  const std::vector<std::string> files = snapshot_files(r.snapshot_dir);
  try {
    r.selection = select_model_files(files, spec.selector, spec.repo);
  } catch (const Error& e) {
    return no(std::string("the cached snapshot ") + r.snapshot_dir + " does not have it: " + e.what());
  }
  for (const std::string& f : r.selection.files)
    if (!std::binary_search(files.begin(), files.end(), f)) return no(f + " is missing from " + r.snapshot_dir);
  if (r.selection.kind == Selection::Kind::Checkpoint) {
    std::string why;
    if (!checkpoint_complete(r.snapshot_dir, files, why)) return no(why);
    r.path = r.snapshot_dir;
  } else if (r.selection.kind == Selection::Kind::Pipeline) {
    r.path = r.snapshot_dir;  // the diffusers folder
  } else {
    r.path = (fs::path(r.snapshot_dir) / r.selection.entry).string();
  }
  return r;
}

}  // namespace kvad::hub
