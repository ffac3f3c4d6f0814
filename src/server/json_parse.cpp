#include "server/json_parse.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvad::server {

namespace {

using json = nlohmann::ordered_json;
// An object's members as the vector they are (ordered_map's operator[]
// takes a key and hides the vector's).
using Members = json::object_t::Container;

// Builds an ordered_json from SAX events, as nlohmann's json_sax_dom_parser
// does, except that a member is appended to its object's vector directly
// (ordered_map's emplace would scan the object for the key first).
class OrderedBuilder {
 public:
  explicit OrderedBuilder(json& root) : root_(root) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool b) { return put(json(b)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return put(json(v)); }
  // Copied, not moved, as nlohmann's DOM parser does: the lexer's buffer
  // has grown by doubling (a 4 MB string sits in up to 8 MB) and is reused
  // for the next string; a move would keep that slack in the value and
  // make the lexer allocate afresh (measured: +86 MB of RSS after 30 x 4 MB
  // prompts, against +32 MB copied and +25 MB with nlohmann's parser).
  bool string(std::string& s) { return put(json(s)); }
  bool binary(json::binary_t& b) { return put(json(json::binary_t(std::move(b)))); }
  bool start_object(std::size_t) { return open(json(json::value_t::object)); }
  bool start_array(std::size_t) { return open(json(json::value_t::array)); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    Frame& f = stack_.back();
    Members& obj = f.v->get_ref<json::object_t&>();
    size_t at = obj.size();
    if (obj.size() < kIndexFrom) {
      // Small objects: a scan costs less than hashing.
      for (size_t i = 0; i < obj.size(); ++i)
        if (obj[i].first == k) {
          at = i;
          break;
        }
    } else {
      if (f.table.size() < 2 * (obj.size() + 1)) rehash(f, obj);
      const size_t mask = f.table.size() - 1;
      size_t h = std::hash<std::string_view>{}(k) & mask;
      for (; f.table[h] != kEmpty; h = (h + 1) & mask)
        if (obj[f.table[h]].first == k) {
          at = f.table[h];
          break;
        }
      if (at == obj.size()) f.table[h] = static_cast<uint32_t>(at);
    }
    if (at == obj.size()) obj.emplace_back(std::move(k), json());  // std::vector's, not ordered_map's emplace
    slot_ = &obj[at].second;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    if (const auto* p = dynamic_cast<const json::parse_error*>(&ex)) throw *p;
    if (const auto* o = dynamic_cast<const json::out_of_range*>(&ex)) throw *o;
    throw json::other_error::create(500, ex.what(), static_cast<const json*>(nullptr));
  }

 private:
  static constexpr size_t kIndexFrom = 16;
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Frame {
    json* v;
    /// Open addressing (linear probing) over member positions, at most half
    /// full: 4 bytes a slot, the keys themselves stay in the object.
    std::vector<uint32_t> table;
  };

  static void rehash(Frame& f, const Members& obj) {
    size_t n = 64;
    while (n < 4 * (obj.size() + 1)) n *= 2;
    f.table.assign(n, kEmpty);
    const size_t mask = n - 1;
    for (size_t i = 0; i < obj.size(); ++i) {
      size_t h = std::hash<std::string_view>{}(obj[i].first) & mask;
      while (f.table[h] != kEmpty) h = (h + 1) & mask;
      f.table[h] = static_cast<uint32_t>(i);
    }
  }

  // Where the next value goes: the root, the end of the open array, or the
  // member slot key() made.
  json* place(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *stack_.back().v;
    if (top.is_array()) {
      json::array_t& a = top.get_ref<json::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  // A container's address stays valid while it is open: only the innermost
  // open container grows.
  bool open(json&& v) {
    stack_.push_back(Frame{place(std::move(v)), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  json& root_;
  std::vector<Frame> stack_;
  json* slot_ = nullptr;
};

}  // namespace

json parse_json_ordered(std::string_view text) {
  json root;
  OrderedBuilder b(root);
  json::sax_parse(text.begin(), text.end(), &b);
  return root;
}

json parse_json_ordered_or_discarded(std::string_view text) {
  try {
    return parse_json_ordered(text);
  } catch (const json::exception&) {
    return json(json::value_t::discarded);
  }
}

}  // namespace kvad::server
