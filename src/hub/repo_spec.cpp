#include "hub/repo_spec.h"

#include <cctype>
#include <string_view>

#include "base/error.h"

namespace kvad::hub {

namespace {

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

bool is_lower_hex(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// One part of a repo id (namespace or name): REPO_ID_REGEX's
// \b[\w\-.]{1,96}\b, ASCII only. \b at both ends means the first and last
// characters are word characters, i.e. not '-' or '.'.
bool valid_id_part(std::string_view p) {
  if (p.empty() || p.size() > 96) return false;
  for (char c : p)
    if (!is_name_char(c)) return false;
  auto word = [](char c) { return c != '-' && c != '.'; };
  return word(p.front()) && word(p.back());
}

}  // namespace

std::string RepoSpec::str() const {
  std::string s = repo;
  if (revision != "main") s += "@" + revision;
  if (!selector.empty()) s += ":" + selector;
  return s;
}

void validate_repo_id(const std::string& repo_id) {
  const size_t slash = repo_id.find('/');
  const bool ok = [&] {
    if (slash == std::string::npos) return valid_id_part(repo_id);
    if (repo_id.find('/', slash + 1) != std::string::npos) return false;
    return valid_id_part(std::string_view(repo_id).substr(0, slash)) &&
           valid_id_part(std::string_view(repo_id).substr(slash + 1));
  }();
  if (!ok)
    throw Error("invalid repo id '" + repo_id +
                "': want org/name with letters, digits, '-', '_' or '.' (not first or last), at most 96 each");
  if (repo_id.find("--") != std::string::npos || repo_id.find("..") != std::string::npos)
    throw Error("invalid repo id '" + repo_id + "': cannot contain '--' or '..'");
  if (ends_with(repo_id, ".git")) throw Error("invalid repo id '" + repo_id + "': cannot end in '.git'");
}

void validate_revision(const std::string& rev) {
  auto bad = [&](const std::string& why) { throw Error("invalid revision '" + rev + "': " + why); };
  if (rev.empty()) bad("empty");
  if (rev.size() > 255) bad("longer than 255 bytes");
  if (rev.front() == '/' || rev.back() == '/') bad("starts or ends with '/'");
  if (rev.find("..") != std::string::npos) bad("contains '..'");
  if (rev.find("//") != std::string::npos) bad("has an empty path segment");
  for (char c : rev) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\' || c == ':' || c == ' ' || c == '~' || c == '^' || c == '?' ||
        c == '*' || c == '[')
      bad("contains a character git does not allow in a ref name");
  }
  size_t start = 0;
  while (start <= rev.size()) {
    size_t end = rev.find('/', start);
    if (end == std::string::npos) end = rev.size();
    const std::string_view seg = std::string_view(rev).substr(start, end - start);
    if (seg == "." || (!seg.empty() && seg.front() == '.')) bad("a path segment starts with '.'");
    start = end + 1;
  }
}

void validate_repo_filename(const std::string& name, const std::string& what) {
  auto bad = [&](const std::string& why) { throw Error(what + " '" + name + "' refused: " + why); };
  if (name.empty()) bad("empty");
  if (name.size() > 4096) bad("longer than 4096 bytes");
  if (name.front() == '/') bad("an absolute path");
  if (name.find('\\') != std::string::npos) bad("contains '\\'");
  if (name.size() >= 2 && std::isalpha(static_cast<unsigned char>(name[0])) && name[1] == ':')
    bad("a drive path");
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) bad("contains a control character");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    const std::string_view seg = std::string_view(name).substr(start, end - start);
    if (seg == "..") bad("contains '..'");
    if (seg == "." || seg.empty()) bad("has an empty or '.' path segment");
    start = end + 1;
  }
}

bool is_commit_hash(const std::string& s) { return is_lower_hex(s, 40); }

bool is_sha256_hex(const std::string& s) { return is_lower_hex(s, 64); }

std::string normalize_etag(const std::string& header) {
  std::string_view v = header;
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
  // _normalize_etag is etag.lstrip("W/").strip('"'): any leading 'W' and '/'
  // characters, then quotes at both ends.
  while (!v.empty() && (v.front() == 'W' || v.front() == '/')) v.remove_prefix(1);
  while (!v.empty() && v.front() == '"') v.remove_prefix(1);
  while (!v.empty() && v.back() == '"') v.remove_suffix(1);
  std::string etag(v);
  bool ok = !etag.empty() && etag.size() <= 128;
  for (char c : etag) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  if (!ok) throw Error("ETag '" + header + "' from the server is not a usable blob name");
  return etag;
}

std::string repo_folder_name(const std::string& repo_id) {
  std::string s = "models";
  size_t start = 0;
  while (true) {
    const size_t slash = repo_id.find('/', start);
    s += "--" + repo_id.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return s;
}

bool looks_like_repo_spec(const std::string& arg) {
  if (arg.empty() || arg[0] == '.' || arg[0] == '/' || arg[0] == '~') return false;
  const std::string repo = arg.substr(0, arg.find_first_of("@:"));
  const size_t slash = repo.find('/');
  if (slash == std::string::npos || repo.find('/', slash + 1) != std::string::npos) return false;
  return !ends_with(repo, ".gguf") && !ends_with(repo, ".safetensors");
}

RepoSpec parse_repo_spec(const std::string& arg) {
  RepoSpec spec;
  std::string head = arg;
  if (const size_t colon = head.find(':'); colon != std::string::npos) {
    spec.selector = head.substr(colon + 1);
    head.resize(colon);
    if (spec.selector.empty()) throw Error("'" + arg + "': nothing after ':' (want a file name or a quant tag)");
  }
  if (const size_t at = head.find('@'); at != std::string::npos) {
    spec.revision = head.substr(at + 1);
    head.resize(at);
  }
  spec.repo = head;
  validate_repo_id(spec.repo);
  validate_revision(spec.revision);
  if (spec.selector.find('/') != std::string::npos || spec.selector.find('.') != std::string::npos)
    validate_repo_filename(spec.selector, "file name");
  return spec;
}

}  // namespace kvad::hub
