// Base URIs and "$id" resources of a JSON Schema document (json_schema_uri.h).
#include "engine/grammar/json_schema_uri.h"

#include <cctype>
#include <vector>

#include "engine/grammar/json_schema.h"

namespace kvad::schema_uri {
namespace {

// RFC 3986 §3: scheme ":" ["//" authority] path ["?" query] ["#" fragment].
struct Uri {
  std::optional<std::string> scheme, authority, query, fragment;
  std::string path;
};

Uri parse(const std::string& s) {
  Uri u;
  size_t at = 0;
  const size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 0 && std::isalpha(static_cast<unsigned char>(s[0])) &&
      s.find_first_of("/?#") > colon) {
    bool ok = true;
    for (size_t i = 1; i < colon; ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      ok &= std::isalnum(c) || c == '+' || c == '-' || c == '.';
    }
    if (ok) {
      std::string scheme = s.substr(0, colon);
      for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      u.scheme = std::move(scheme);
      at = colon + 1;
    }
  }
  if (s.compare(at, 2, "//") == 0) {
    const size_t end = s.find_first_of("/?#", at + 2);
    u.authority = s.substr(at + 2, end == std::string::npos ? std::string::npos : end - at - 2);
    at = end == std::string::npos ? s.size() : end;
  }
  const size_t path_end = std::min(s.find_first_of("?#", at), s.size());
  u.path = s.substr(at, path_end - at);
  at = path_end;
  if (at < s.size() && s[at] == '?') {
    const size_t end = std::min(s.find('#', at), s.size());
    u.query = s.substr(at + 1, end - at - 1);
    at = end;
  }
  if (at < s.size() && s[at] == '#') u.fragment = s.substr(at + 1);
  return u;
}

std::string compose(const Uri& u) {
  std::string s;
  if (u.scheme) s += *u.scheme + ":";
  if (u.authority) s += "//" + *u.authority;
  s += u.path;
  if (u.query) s += "?" + *u.query;
  if (u.fragment) s += "#" + *u.fragment;
  return s;
}

// RFC 3986 §5.2.4.
std::string remove_dot_segments(std::string in) {
  std::string out;
  while (!in.empty()) {
    if (in.rfind("../", 0) == 0) in.erase(0, 3);
    else if (in.rfind("./", 0) == 0) in.erase(0, 2);
    else if (in.rfind("/./", 0) == 0) in.replace(0, 3, "/");
    else if (in == "/.") in = "/";
    else if (in.rfind("/../", 0) == 0 || in == "/..") {
      in = in.size() == 3 ? std::string("/") : in.substr(3);
      const size_t cut = out.rfind('/');
      out.erase(cut == std::string::npos ? 0 : cut);
    } else if (in == "." || in == "..") {
      in.clear();
    } else {
      const size_t next = in.find('/', in[0] == '/' ? 1 : 0);
      out += in.substr(0, next);
      in = next == std::string::npos ? std::string() : in.substr(next);
    }
  }
  return out;
}

std::string without_fragment(const std::string& uri) { return uri.substr(0, uri.find('#')); }

std::string escape_token(const std::string& k) {
  std::string t;
  for (char c : k) {
    if (c == '~') t += "~0";
    else if (c == '/') t += "~1";
    else t += c;
  }
  return t;
}

bool holds_values(const std::string& k) { return k == "enum" || k == "const" || k == "default" || k == "examples"; }

// The base URI inside `node`, given the one around it.
std::string base_in(const oj& node, const std::string& outer) {
  if (!node.is_object()) return outer;
  auto it = node.find("$id");
  return it != node.end() && it->is_string() ? without_fragment(resolve(outer, it->get<std::string>())) : outer;
}

std::string root_base(const oj& root) { return base_in(root, kDefaultBase); }

void walk(const oj& node, const std::string& ptr, const std::string& outer, Index& ix, size_t& seen) {
  if (++seen > 1000000) return;
  if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) walk(node[i], ptr + "/" + std::to_string(i), outer, ix, seen);
    return;
  }
  if (!node.is_object()) return;
  const std::string base = base_in(node, outer);
  if (base != outer || ptr.empty()) ix.resources.try_emplace(base, Place{&node, ptr});
  for (const char* kw : {"$anchor", "$dynamicAnchor"}) {
    auto it = node.find(kw);
    if (it == node.end() || !it->is_string()) continue;
    auto [at, added] = ix.anchors.try_emplace({base, it->get<std::string>()}, Place{&node, ptr});
    if (!added && at->second.node != &node)
      throw SchemaError("$anchor", ptr.empty() ? "#" : ptr, "anchor '" + it->get<std::string>() + "' is defined twice");
  }
  for (auto& [k, v] : node.items())
    if (!holds_values(k)) walk(v, ptr + "/" + escape_token(k), base, ix, seen);
}

// Whether a "$ref" below needs its base: inside an embedded resource, or
// not a bare fragment.
bool needs_base(const oj& node, bool embedded, bool is_root) {
  if (node.is_array()) {
    for (const oj& x : node)
      if (needs_base(x, embedded, false)) return true;
    return false;
  }
  if (!node.is_object()) return false;
  if (!is_root && node.contains("$id") && node["$id"].is_string()) embedded = true;
  if (auto it = node.find("$ref"); it != node.end() && it->is_string()) {
    const std::string& r = it->get_ref<const std::string&>();
    if (embedded || r.empty() || r[0] != '#') return true;
  }
  for (auto& [k, v] : node.items())
    if (!holds_values(k) && needs_base(v, embedded, false)) return true;
  return false;
}

void rewrite(oj& node, const std::string& outer, bool embedded, bool is_root) {
  if (node.is_array()) {
    for (oj& x : node) rewrite(x, outer, embedded, false);
    return;
  }
  if (!node.is_object()) return;
  const std::string base = base_in(node, outer);
  if (!is_root && node.contains("$id") && node["$id"].is_string()) embedded = true;
  if (auto it = node.find("$ref"); it != node.end() && it->is_string()) {
    const std::string r = it->get<std::string>();
    if (embedded || r.empty() || r[0] != '#') *it = resolve(base, r);
  }
  for (auto& [k, v] : node.items())
    if (!holds_values(k)) rewrite(v, base, embedded, false);
}

}  // namespace

std::string resolve(const std::string& base_text, const std::string& ref_text) {
  const Uri r = parse(ref_text), b = parse(base_text);
  Uri t;
  if (r.scheme) {
    t = r;
    t.path = remove_dot_segments(r.path);
  } else {
    if (r.authority) {
      t.authority = r.authority;
      t.path = remove_dot_segments(r.path);
      t.query = r.query;
    } else {
      if (r.path.empty()) {
        t.path = b.path;
        t.query = r.query ? r.query : b.query;
      } else {
        if (r.path[0] == '/') {
          t.path = remove_dot_segments(r.path);
        } else {  // §5.2.3 merge
          std::string merged;
          if (b.authority && b.path.empty()) {
            merged = "/" + r.path;
          } else {
            const size_t cut = b.path.rfind('/');
            merged = (cut == std::string::npos ? std::string() : b.path.substr(0, cut + 1)) + r.path;
          }
          t.path = remove_dot_segments(merged);
        }
        t.query = r.query;
      }
      t.authority = b.authority;
    }
    t.scheme = b.scheme;
  }
  t.fragment = r.fragment;
  return compose(t);
}

Index index(const oj& root) {
  Index ix;
  size_t seen = 0;
  walk(root, "", root_base(root), ix, seen);
  ix.resources.try_emplace(kDefaultBase, Place{&root, ""});
  return ix;
}

std::optional<oj> absolutize(const oj& root) {
  if (!needs_base(root, false, true)) return std::nullopt;
  oj doc = root;
  rewrite(doc, kDefaultBase, false, true);
  return doc;
}

}  // namespace kvad::schema_uri
