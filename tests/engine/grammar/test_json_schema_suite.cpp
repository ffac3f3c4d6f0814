// The JSON-Schema-Test-Suite (draft 2020-12, from the `jsonschema` sdist;
// tests/fixtures/json_schema_suite, made by tools/make_json_schema_suite.py)
// against the schema -> grammar compiler: every instance, serialized by
// Python's json.dumps (compact and with spaces), fed byte by byte: the
// compact text to the compact grammar (the server's default), both to the
// pretty one. A group either compiles and then every valid instance is
// accepted and every invalid one rejected, or is refused with a SchemaError
// naming a keyword. The only exceptions are listed in kKnown below, each
// with its reason. Prints per file: cases right, all, refused, known
// exceptions, wrong, and valid instances the schema-order grammar rejects.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/grammar/json_schema.h"

namespace kvad {
namespace {

using oj = nlohmann::ordered_json;

std::string suite_dir() {
  const char* env = std::getenv("KVAD_SOURCE_DIR");
  return std::string(env ? env : KVAD_SOURCE_DIR) + "/tests/fixtures/json_schema_suite";
}

// file | group description | test description -> why the grammar gets it wrong.
const std::map<std::string, std::string> kKnown = [] {
  // kvad asserts `format` (the format-assertion vocabulary: a response_format
  // that names a format gets that format); the suite's default treats it as
  // an annotation, so its "only an annotation by default" cases differ.
  std::map<std::string, std::string> k;
  for (const char* f : {"email", "ipv4", "date", "date-time", "time", "uuid", "ipv6", "hostname", "json-pointer",
                        "relative-json-pointer", "iri", "iri-reference", "uri", "uri-reference", "uri-template",
                        "duration"})
    k["format.json|" + std::string(f) + " format|invalid " + f + " string is only an annotation by default"] =
        "format is asserted";
  return k;
}();

struct Count { int pass = 0, total = 0, refused = 0, known = 0, wrong = 0, reordered = 0; std::set<std::string> keywords; };

TEST(JsonSchemaSuite, Draft2020_12) {
  std::map<std::string, Count> counts;
  std::vector<std::string> failures;
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(suite_dir()))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GT(files.size(), 40u);
  for (auto& path : files) {
    const std::string file = path.filename().string();
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    const oj groups = oj::parse(ss.str());
    Count& c = counts[file];
    for (const oj& g : groups) {
      const std::string gd = g["description"].get<std::string>();
      std::shared_ptr<const Grammar> compact, pretty;
      std::shared_ptr<const Grammar> ordered;  // keys in the schema's order, compact, as the server uses it
      JsonSchemaOptions any;
      any.key_order = JsonSchemaOptions::KeyOrder::kAny;
      JsonSchemaOptions any_pretty = any;
      any_pretty.whitespace = JsonSchemaOptions::Whitespace::kPretty;
      try {
        compact = json_schema_grammar(g["schema"], any);
        pretty = json_schema_grammar(g["schema"], any_pretty);
        ordered = json_schema_grammar(g["schema"]);
      } catch (const SchemaError& e) {
        c.refused += static_cast<int>(g["tests"].size());
        c.total += static_cast<int>(g["tests"].size());
        c.keywords.insert(e.keyword.empty() ? "(limit)" : e.keyword);
        // KVAD_SCHEMA_SUITE_WHY=1: each refused group with its message.
        if (std::getenv("KVAD_SCHEMA_SUITE_WHY"))
          std::printf("refused %s | %s (%zu cases): %s\n", file.c_str(), gd.c_str(), g["tests"].size(), e.what());
        EXPECT_NE(std::string(e.what()).find("json schema:"), std::string::npos) << e.what();
        continue;
      }
      for (const oj& t : g["tests"]) {
        const std::string td = t["description"].get<std::string>();
        const bool valid = t["valid"].get<bool>();
        ++c.total;
        bool ok = true;
        std::string got;
        for (auto [form, grammar] : {std::pair{"compact", compact}, {"compact", pretty}, {"spaced", pretty}}) {
          GrammarMatcher m(grammar);
          const std::string text = t[form].get<std::string>();
          const bool accepted = m.accept(text) && m.accepting();
          if (accepted != valid) {
            ok = false;
            got += std::string(form) + (grammar == compact ? " (compact grammar) " : " (pretty grammar) ") +
                   (accepted ? "accepted" : "rejected") + " ";
          }
        }
        // Compact grammar: no whitespace outside strings at all.
        if (valid && t["spaced"] != t["compact"]) {
          GrammarMatcher m(compact);
          if (m.accept(t["spaced"].get<std::string>()) && m.accepting())
            failures.push_back(file + "|" + gd + "|" + td + ": the compact grammar accepts whitespace");
        }
        // Schema order accepts a subset: never an invalid instance.
        {
          GrammarMatcher m(ordered);
          const bool accepted = m.accept(t["compact"].get<std::string>()) && m.accepting();
          if (accepted && !valid) failures.push_back(file + "|" + gd + "|" + td + ": schema-order grammar accepts it");
          if (!accepted && valid) ++c.reordered;
        }
        if (ok) { ++c.pass; continue; }
        const std::string key = file + "|" + gd + "|" + td;
        if (kKnown.count(key)) { ++c.known; continue; }
        ++c.wrong;
        failures.push_back(key + ": " + got + "(valid " + (valid ? "true" : "false") + ") " + t["compact"].get<std::string>());
      }
    }
  }
  int P = 0, T = 0, R = 0, K = 0, W = 0, O = 0;
  // pass: both serializations right with keys in any order; ordered: valid
  // instances the schema-order grammar rejects (their keys are in another
  // order); refused: cases of groups whose schema is refused.
  std::printf("%-32s %6s %6s %7s %5s %5s %7s  refused keywords\n", "file", "pass", "total", "refused", "known", "wrong",
              "ordered");
  for (auto& [f, c] : counts) {
    std::string kw;
    for (auto& k : c.keywords) kw += (kw.empty() ? "" : ",") + k;
    std::printf("%-32s %6d %6d %7d %5d %5d %7d  %s\n", f.c_str(), c.pass, c.total, c.refused, c.known, c.wrong,
                c.reordered, kw.c_str());
    P += c.pass; T += c.total; R += c.refused; K += c.known; W += c.wrong; O += c.reordered;
  }
  std::printf("%-32s %6d %6d %7d %5d %5d %7d\n", "all", P, T, R, K, W, O);
  std::printf("compiled and right: %d of %d cases (%.1f%%); refused %d; wrong %d\n", P, T, 100.0 * P / T, R, W);
  for (auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace kvad
