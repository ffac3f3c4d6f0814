// GBNF parsing, the byte-level recognizer, token masks over SmolLM2's real
// vocabulary, and the broken-input corpus of grammars and schemas
// (tests/fixtures/grammar/broken: every file is a clean GrammarError).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "io/gguf.h"
#include "model_path.h"
#include "tokenizer/tokenizer.h"

namespace kvad {
namespace {

using oj = nlohmann::ordered_json;

bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text) && m.accepting();
}
bool prefix_ok(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text);
}

std::string source_dir() {
  const char* env = std::getenv("KVAD_SOURCE_DIR");
  return env ? env : KVAD_SOURCE_DIR;
}

// A JSON grammar written from RFC 8259's ABNF (section 2-7), with a bound
// on whitespace.
const char* kJson = R"(# JSON (RFC 8259)
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array  ::=
  "[" ws (
    value
    (ws "," ws value)*
  ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws     ::= [ \t\n\r]{0,20}
)";

TEST(Gbnf, JsonGrammar) {
  auto g = Grammar::parse(kJson);
  for (const char* ok : {"{}", "[]", "0", "-1.5e+10", "\"a\\u00e9b\"", "{\"a\": [1, 2, {\"b\": null}]}", "true",
                         "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "[ 1 ,\n2 ]"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"{", "[1,]", "01", "\"\x01\"", "tru", "{\"a\" 1}", "\"\\x\"", "1.", "\"\xc3\"", "\"\xff\"",
                          "\"\xed\xa0\x80\""})
    EXPECT_FALSE(accepts(g, bad)) << bad;
  EXPECT_TRUE(prefix_ok(g, "{\"a\": [1, "));
  EXPECT_FALSE(prefix_ok(g, "{\"a\": [1, ]"));
}

TEST(Gbnf, Repetitions) {
  auto g = Grammar::parse("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,} \"d\"? [x-z]*\n");
  EXPECT_TRUE(accepts(g, "aabbbc"));
  EXPECT_TRUE(accepts(g, "aaaabbbcccdxyz"));
  EXPECT_FALSE(accepts(g, "abbbc"));
  EXPECT_FALSE(accepts(g, "aaaaabbbc"));
  EXPECT_FALSE(accepts(g, "aabbc"));
  EXPECT_FALSE(accepts(g, "aabbb"));
  EXPECT_FALSE(accepts(g, "aabbbcdd"));
}

TEST(Gbnf, ClassesAndEscapes) {
  auto g = Grammar::parse(R"(root ::= [^a-c\n] [\x41-\x43] "\t\"\\" [\u00e9-\u00ea] [\U0001F600] . "\[\]")");
  EXPECT_TRUE(accepts(g, "dA\t\"\\\xc3\xa9\xf0\x9f\x98\x80z[]"));
  EXPECT_TRUE(accepts(g, "\xe2\x82\xac" "C\t\"\\\xc3\xaa\xf0\x9f\x98\x80\xc3\xa9[]"));
  EXPECT_FALSE(accepts(g, "bA\t\"\\\xc3\xa9\xf0\x9f\x98\x80z[]"));
  EXPECT_FALSE(accepts(g, "\nA\t\"\\\xc3\xa9\xf0\x9f\x98\x80z[]"));
  EXPECT_FALSE(accepts(g, "dD\t\"\\\xc3\xa9\xf0\x9f\x98\x80z[]"));
}

TEST(Gbnf, RecursionAndFinished) {
  auto g = Grammar::parse("root ::= \"(\" root? \")\"\n");
  EXPECT_TRUE(accepts(g, "((()))"));
  EXPECT_FALSE(accepts(g, "(()"));
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept("(())"));
  EXPECT_TRUE(m.finished());  // nothing can follow
  auto g2 = Grammar::parse("root ::= \"a\"+\n");
  GrammarMatcher m2(g2);
  ASSERT_TRUE(m2.accept("aa"));
  EXPECT_TRUE(m2.accepting());
  EXPECT_FALSE(m2.finished());
  EXPECT_FALSE(m2.accept("b"));
  EXPECT_TRUE(m2.accept("a"));  // state unchanged by the refused byte
}

TEST(Gbnf, DepthIsBounded) {
  // Past max_depth a path is dead: deep nesting is refused, not a crash.
  auto g = Grammar::parse("root ::= \"[\" root? \"]\"\n");
  GrammarLimits lim;
  lim.max_depth = 64;
  GrammarMatcher m(g, lim);
  EXPECT_TRUE(m.accept(std::string(50, '[')));
  EXPECT_FALSE(m.accept(std::string(50, '[')));
}

TEST(Gbnf, AmbiguityIsBounded) {
  // Every split of the a's is a parse; hash-consed stacks keep it small.
  auto g = Grammar::parse("root ::= x x x x\nx ::= \"a\"*\n");
  EXPECT_TRUE(accepts(g, std::string(2000, 'a')));
  // A grammar whose stacks multiply past the cap is a clean error.
  auto g2 = Grammar::parse("root ::= (a | b)*\na ::= \"x\" root \"y\"\nb ::= \"x\" root \"yy\"\n");
  GrammarLimits lim;
  lim.max_stacks = 64;
  GrammarMatcher m(g2, lim);
  EXPECT_THROW(m.accept(std::string(200, 'x')), GrammarError);
}

TEST(Gbnf, Errors) {
  auto msg = [](const std::string& text) {
    try {
      Grammar::parse(text);
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  EXPECT_NE(msg("root ::= foo\n").find("undefined rule 'foo'"), std::string::npos);
  EXPECT_NE(msg("root ::= root \"a\" | \"b\"\n").find("left recursive"), std::string::npos);
  EXPECT_NE(msg("root ::= x* \nx ::= \"a\"?\n").find("left recursive"), std::string::npos);
  EXPECT_NE(msg("start ::= \"a\"\n").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\"{3,2}\n").find("line 1"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\"{100000}\n").find("over 10000"), std::string::npos);
  EXPECT_NE(msg("root ::= \"abc\n").find("line 1, column"), std::string::npos);
  EXPECT_NE(msg("root ::= [z-a]\n").find("out of order"), std::string::npos);
  EXPECT_NE(msg("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\"\nroot ::= \"b\"\n").find("defined twice"), std::string::npos);
  EXPECT_NE(msg("root ::= ((\"a\")\n").find("expected ')'"), std::string::npos);
  // Nested repetitions share their inner rule (no blow-up); a long flat
  // expansion stops at the element cap.
  EXPECT_EQ(msg("root ::= ((((\"ab\"{100}){100}){100}){100})\n"), "(parsed)");
  std::string flat = "root ::=";
  for (int i = 0; i < 110; ++i) flat += " \"a\"{10000}";
  EXPECT_NE(msg(flat + "\n").find("elements"), std::string::npos);
}

// A grammar for tool calls built from the pieces the schema compiler
// exposes: Hermes-style <tool_call> wrapping, several tools in one grammar.
TEST(JsonSchemaApi, ToolCallGrammar) {
  const oj tools = oj::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}}, "required": ["city"],
      "additionalProperties": false}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}])");
  JsonSchemaOptions o;
  o.prefix = "call-";
  o.whitespace = JsonSchemaOptions::Whitespace::kPretty;  // as the server compiles tool calls
  const std::string text = "root ::= \"<tool_call>\\n\" call-root \"\\n</tool_call>\"\n" +
                           json_schema_to_gbnf(tool_call_schema(tools), o);
  auto g = Grammar::parse(text);
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":-2}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":1}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\":\"nope\",\"arguments\":{}}\n</tool_call>"));
  // The name comes first (a streaming parser can announce the call early).
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"arguments\":{\"a\":1,\"b\":2},\"name\":\"add\"}\n</tool_call>"));
  // A named function: a one-element tools array; parameters "parameters".
  auto one = json_schema_grammar(tool_call_schema(oj::array({tools[1]}), "name", "parameters"));
  EXPECT_TRUE(accepts(one, "{\"name\":\"add\",\"parameters\":{\"a\":1,\"b\":2}}"));
  EXPECT_FALSE(accepts(one, "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"x\"}}"));
  EXPECT_THROW(tool_call_schema(oj::parse(R"([{"type": "function"}])")), SchemaError);
  o.prefix = "9bad";
  EXPECT_THROW(json_schema_to_gbnf(oj::object(), o), SchemaError);
}

// A refused schema names the subschema as a JSON pointer, also when the
// refusal comes from the compiled grammar (a pattern or a $ref that loops
// without consuming input): the pointer of the subschema, not the root's '#'.
TEST(JsonSchemaApi, ErrorsNameTheSubschemasPointer) {
  struct Case {
    const char* schema;
    const char* keyword;
    const char* path;
  };
  for (const Case& c : {
           Case{R"({"properties": {"x": {"type": "string", "pattern": "(a*)*"}}})", "pattern", "/properties/x"},
           Case{R"({"items": {"properties": {"y": {"type": "string", "pattern": "(|b)+"}}}})", "pattern",
                "/items/properties/y"},
           Case{R"({"properties": {"x": {"type": "string", "format": "hostname-ish"}}})", "format", "/properties/x"},
           Case{R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"z": {"$ref": "#/$defs/a"}}})", "$ref",
                "/properties/z"},
       }) {
    SCOPED_TRACE(c.schema);
    for (const char* prefix : {"", "call-"}) {
      try {
        JsonSchemaOptions o;
        o.prefix = prefix;
        json_schema_grammar(oj::parse(c.schema), o);
        ADD_FAILURE() << "compiled";
      } catch (const SchemaError& e) {
        EXPECT_EQ(e.keyword, c.keyword) << e.what();
        EXPECT_EQ(e.path, c.path) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::string("at '") + c.path + "'"), std::string::npos) << e.what();
      }
    }
  }
}

// Number bounds compare decimals digit by digit: checked against integer
// arithmetic on values scaled by 10^4, over random bounds and values.
TEST(JsonSchemaApi, DecimalBoundsMatchArithmetic) {
  std::mt19937 rng(3);
  auto dec = [](int64_t v) {  // v / 10^4 as JSON text, trailing zeros kept sometimes
    std::string sgn = v < 0 ? "-" : "";
    const int64_t a = v < 0 ? -v : v;
    std::string frac = std::to_string(10000 + a % 10000).substr(1);
    return sgn + std::to_string(a / 10000) + "." + frac;
  };
  for (int k = 0; k < 60; ++k) {
    const int64_t lo = static_cast<int64_t>(rng() % 60000) - 30000, hi = lo + static_cast<int64_t>(rng() % 40000);
    const bool lo_ex = rng() & 1, hi_ex = rng() & 1;
    const bool has_lo = rng() % 4 != 0, has_hi = rng() % 4 != 0;
    oj schema = {{"type", "number"}};
    if (has_lo) schema[lo_ex ? "exclusiveMinimum" : "minimum"] = oj::parse(dec(lo));
    if (has_hi) schema[hi_ex ? "exclusiveMaximum" : "maximum"] = oj::parse(dec(hi));
    auto g = json_schema_grammar(schema);
    for (int t = 0; t < 40; ++t) {
      int64_t v = static_cast<int64_t>(rng() % 80000) - 40000;
      if (t < 4) v = (t < 2 ? lo : hi) + (t % 2 ? 0 : 1);
      const bool want = (!has_lo || (lo_ex ? v > lo : v >= lo)) && (!has_hi || (hi_ex ? v < hi : v <= hi));
      std::string text = dec(v);
      while (t % 3 == 0 && text.back() == '0') text.pop_back();  // "1.5", "2."
      if (text.back() == '.') text.pop_back();
      if (text == "-0") text = "0";
      EXPECT_EQ(accepts(g, text), want) << schema.dump() << " " << text;
    }
  }
}

// Integer bounds beyond 2^53 (where a double cannot hold every integer) are
// enforced exactly, against __int128 arithmetic: minimum / exclusiveMinimum
// pairs and their allOf merge pick the tighter bound by value, and the
// grammar accepts exactly the integers inside. A decimal bound that large
// was rounded when it was read: refused, naming it.
TEST(JsonSchemaApi, IntegerBoundsBeyondDoubleAreExact) {
  using i128 = __int128;
  std::mt19937_64 rng(11);
  auto text = [](i128 v) { return std::to_string(static_cast<int64_t>(v)); };
  const int64_t bases[] = {9007199254740992, 100000000000000000, -9007199254740993, 999999999999999980};
  for (int k = 0; k < 80; ++k) {
    const int64_t base = bases[k % 4];
    // hi - lo >= 2: bounds that allow nothing as written are refused
    // before compiling (JsonSchemaKeywords.BoundsThatAllowNothing...).
    const int64_t lo = base + static_cast<int64_t>(rng() % 5), hi = lo + 2 + static_cast<int64_t>(rng() % 5);
    const int64_t lo2 = lo + static_cast<int64_t>(rng() % 3) - 1;  // a second lower bound, +-1 of the first
    const bool lo_ex = rng() & 1, lo2_ex = rng() & 1, hi_ex = rng() & 1;
    const bool merged = rng() & 1;
    const char* type = k % 3 == 0 ? "number" : "integer";
    oj a = {{"type", type}}, b = oj::object();
    a[lo_ex ? "exclusiveMinimum" : "minimum"] = lo;
    a[hi_ex ? "exclusiveMaximum" : "maximum"] = hi;
    (merged ? b : a)[lo2_ex ? "exclusiveMinimum" : "minimum"] = lo2;
    if (!merged && (lo_ex == lo2_ex)) a[lo2_ex ? "exclusiveMinimum" : "minimum"] = std::max(lo, lo2);
    const oj schema = merged ? oj{{"allOf", oj::array({a, b})}} : a;
    // What holds, from the schema as built (a key set twice kept its last value).
    auto holds = [&](i128 v) {
      const oj* parts[] = {&a, &b};
      for (const oj* p : parts)
        for (const auto& [kw, bound] : p->items()) {
          if (!bound.is_number_integer()) continue;
          const i128 x = bound.get<int64_t>();
          if ((kw == "minimum" && v < x) || (kw == "exclusiveMinimum" && v <= x) || (kw == "maximum" && v > x) ||
              (kw == "exclusiveMaximum" && v >= x))
            return false;
        }
      return true;
    };
    bool some = false;
    for (i128 v = static_cast<i128>(std::min(lo, lo2)) - 2; v <= static_cast<i128>(hi) + 2; ++v) some |= holds(v);
    if (!some && std::string(type) == "integer") {  // a schema no value satisfies is refused
      EXPECT_THROW(json_schema_grammar(schema), SchemaError) << schema.dump();
      continue;
    }
    auto g = json_schema_grammar(schema);
    for (i128 v = static_cast<i128>(std::min(lo, lo2)) - 2; v <= static_cast<i128>(hi) + 2; ++v)
      EXPECT_EQ(accepts(g, text(v)), holds(v)) << schema.dump() << " " << text(v);
  }
  for (const char* bad : {R"({"type": "integer", "minimum": 1.00000000000000001e17})",
                          R"({"type": "integer", "maximum": 9007199254740993.0})",
                          R"({"type": "number", "exclusiveMinimum": -1e16})"}) {
    try {
      json_schema_grammar(oj::parse(bad));
      ADD_FAILURE() << bad;
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find("imum"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("2^53"), std::string::npos) << e.what();
    }
  }
}

// Schemas of 10^5 properties, required names, $defs or enum values are
// refused (or compiled) in time linear in their size: the ctest timeout is
// the deadline (required and allOf's required union were quadratic: 148 s
// and 510 s for these sizes), and a oneOf of 1000 consts compiles.
TEST(JsonSchemaApi, LargeSchemasCostLinearTime) {
  const int n = 100000;
  oj props = oj::object(), defs = oj::object(), req = oj::array(), req2 = oj::array(), en = oj::array(), en2 = oj::array();
  for (int i = 0; i < n; ++i) {
    const std::string k = std::to_string(i);
    props.get_ref<oj::object_t&>().emplace_back("p" + k, oj{{"type", "integer"}});  // appended: no scan per key
    defs.get_ref<oj::object_t&>().emplace_back("d" + k, oj{{"type", "integer"}});
    req.push_back("p" + k);
    req2.push_back("q" + k);
    en.push_back("v" + k);
    en2.push_back("w" + k);
  }
  oj refs = oj::object();
  for (int i = 0; i < 4000; ++i) refs["r" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(n - 1 - i)}};
  struct C {
    oj schema;
    const char* keyword;
  };
  const C cases[] = {
      {{{"type", "object"}, {"properties", props}}, "properties"},
      {{{"type", "object"}, {"properties", oj::object()}, {"required", req}}, "properties"},
      {{{"allOf", oj::array({oj{{"required", req}}, oj{{"required", req2}}})}}, "properties"},
      {{{"$defs", defs}, {"type", "object"}, {"properties", refs}}, "properties"},
      {{{"allOf", oj::array({oj{{"enum", en}}, oj{{"enum", en2}}})}}, "enum"},
      {{{"oneOf", oj::array({oj{{"enum", en}}, oj{{"enum", en2}}})}}, "enum"},
  };
  for (const C& c : cases) {
    try {
      json_schema_grammar(c.schema);
      ADD_FAILURE() << c.keyword;
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find(c.keyword), std::string::npos) << e.what();
    }
  }
  // One reference among 10^5 definitions resolves (through the index).
  auto g = json_schema_grammar(oj{{"$defs", defs}, {"$ref", "#/$defs/d99999"}});
  EXPECT_TRUE(accepts(g, "42"));
  EXPECT_FALSE(accepts(g, "\"x\""));
  oj consts = oj::array();
  for (int i = 0; i < 1000; ++i) consts.push_back({{"const", "c" + std::to_string(i)}});
  auto one = json_schema_grammar(oj{{"oneOf", consts}});
  EXPECT_TRUE(accepts(one, "\"c999\""));
  EXPECT_FALSE(accepts(one, "\"c1000\""));
  // Overlapping oneOf branches: exactly one holds (each branch and the
  // negation of the others); refused, naming the first pair found, where a
  // branch cannot be negated.
  auto both = json_schema_grammar(oj::parse(R"({"oneOf": [{"type": "string"}, {"enum": [1, "a"]}]})"));
  EXPECT_TRUE(accepts(both, "\"b\""));
  EXPECT_TRUE(accepts(both, "1"));
  EXPECT_FALSE(accepts(both, "\"a\""));
  auto nums = json_schema_grammar(oj::parse(R"({"oneOf": [{"enum": [1]}, {"enum": [2, 1.0]}]})"));
  EXPECT_TRUE(accepts(nums, "2"));
  EXPECT_FALSE(accepts(nums, "1"));
  EXPECT_THROW(json_schema_grammar(oj::parse(R"({"oneOf": [{"pattern": "a"}, {"pattern": "b"}]})")), SchemaError);
  EXPECT_NO_THROW(json_schema_grammar(oj::parse(R"({"oneOf": [{"type": "string"}, {"enum": [1, 2]}, {"type": "boolean"}]})")));
}

// multipleOf with decimal divisors, against integer arithmetic on values
// scaled by 10^4 (numbers and integers).
TEST(JsonSchemaApi, DecimalMultipleOfMatchesArithmetic) {
  std::mt19937 rng(5);
  auto dec = [](int64_t v) {
    std::string sgn = v < 0 ? "-" : "";
    const int64_t a = v < 0 ? -v : v;
    std::string text = sgn + std::to_string(a / 10000) + "." + std::to_string(10000 + a % 10000).substr(1);
    return text;
  };
  for (const char* k : {"0.5", "1.5", "0.25", "0.01", "2.5", "0.3", "7", "0.125"}) {
    const int64_t k4 = static_cast<int64_t>(std::llround(std::stod(k) * 10000));
    for (const char* type : {"number", "integer"}) {
      auto g = json_schema_grammar(oj::parse(std::string(R"({"type": ")") + type + R"(", "multipleOf": )" + k + "}"));
      for (int t = 0; t < 200; ++t) {
        int64_t v = static_cast<int64_t>(rng() % 200000) - 100000;
        if (t % 2) v = v / k4 * k4;  // half of them multiples
        if (t % 5 == 0) v = v / 10000 * 10000;  // integers
        const bool is_int = v % 10000 == 0;
        const bool want = v % k4 == 0 && (std::string(type) == "number" || is_int);
        std::string text = dec(v);
        if (t % 3 == 0) { while (text.back() == '0') text.pop_back(); if (text.back() == '.') text.pop_back(); }
        if (text == "-0") text = "0";
        EXPECT_EQ(accepts(g, text), want) << type << " multipleOf " << k << ": " << text;
      }
    }
  }
}

// Every file of the broken corpus fails cleanly: *.gbnf with GrammarError,
// *.json (schemas) with SchemaError naming a keyword or a limit.
TEST(GrammarCorpus, BrokenInputsFailCleanly) {
  const std::string dir = source_dir() + "/tests/fixtures/grammar/broken";
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    ++n;
    if (e.path().extension() == ".gbnf") {
      EXPECT_THROW(Grammar::parse(text), GrammarError) << e.path();
    } else {
      bool clean = false;
      try {
        json_schema_grammar(oj::parse(text));
      } catch (const SchemaError& err) {
        clean = std::string(err.what()).rfind("json schema:", 0) == 0;
      } catch (const nlohmann::json::exception&) {
        clean = true;  // not JSON: the server answers 400 before compiling
      }
      EXPECT_TRUE(clean) << e.path();
    }
  }
  EXPECT_GE(n, 20);
}

// ------------------------------------------------------------ token masks

struct Vocab {
  std::shared_ptr<const gguf::File> f;
  std::shared_ptr<const Tokenizer> tok;
  std::shared_ptr<const TokenTrie> trie;
};
const Vocab* vocab() {
  static Vocab* v = [] {
    const std::string path = test::find_model("smollm2-135m");
    if (path.empty()) return static_cast<Vocab*>(nullptr);
    auto* x = new Vocab;
    x->f = gguf::File::open(path);
    x->tok = Tokenizer::from_gguf(*x->f);
    x->trie = std::make_shared<TokenTrie>(*x->tok);
    return x;
  }();
  return v;
}

// The trie walk equals checking every token on its own with a fresh
// matcher fed the same text, at several points of a JSON-schema output.
TEST(TokenGrammar, MaskEqualsPerTokenCheck) {
  const Vocab* v = vocab();
  if (!v) GTEST_SKIP() << "smollm2-135m not installed";
  const oj schema = oj::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
      "age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b c"]}}},
      "required":["name","age"],"additionalProperties":false})");
  JsonSchemaOptions pretty;
  pretty.whitespace = JsonSchemaOptions::Whitespace::kPretty;
  auto g = json_schema_grammar(schema, pretty);
  const std::string out = "{\"name\": \"Ann \\u00e9\xc3\xa9\", \"age\": 42, \"tags\": [\"b c\"]}";
  ASSERT_TRUE(accepts(g, out));
  std::vector<uint8_t> allowed;
  std::mt19937 rng(7);
  const int32_t nv = v->trie->n_vocab();
  for (size_t cut : {size_t{0}, size_t{1}, size_t{9}, size_t{16}, size_t{25}, size_t{33}, out.size()}) {
    TokenGrammar t(g, v->trie);
    // The text up to `cut` as the tokenizer splits it, accepted token by token.
    const std::vector<int32_t> ids = v->tok->encode(out.substr(0, cut), false, false);
    std::string fed;
    for (int32_t id : ids) {
      ASSERT_TRUE(t.accept(id)) << "cut " << cut;
      fed += v->trie->bytes(id);
    }
    ASSERT_EQ(fed, out.substr(0, cut));
    t.mask(allowed);
    int n_allowed = 0;
    for (int32_t id = 0; id < nv; ++id) {
      if (allowed[id]) ++n_allowed;
      // Check every allowed token, and a sample of the others.
      if (!allowed[id] && rng() % 16 != 0) continue;
      bool expect;
      if (std::find(v->trie->eog().begin(), v->trie->eog().end(), id) != v->trie->eog().end()) {
        expect = accepts(g, fed);
      } else if (!v->trie->in_trie(id)) {
        expect = false;
      } else {
        expect = prefix_ok(g, fed + v->trie->bytes(id));
      }
      ASSERT_EQ(allowed[id] != 0, expect) << "cut " << cut << " token " << id << " '" << v->trie->bytes(id) << "'";
    }
    EXPECT_GT(n_allowed, 0);
    if (cut == out.size()) {
      EXPECT_TRUE(t.finished());
    }
  }
}

// Mask cost: printed, never asserted (speed is shown by numbers).
// Small table caps, so the matcher compacts (renumbering its states) inside
// accept() again and again over a long reply: a mask cached under an old
// state id must never be used again. Every token sampled from the mask is
// accepted.
TEST(TokenGrammar, MasksStayRightAcrossCompactions) {
  const Vocab* v = vocab();
  if (!v) GTEST_SKIP() << "smollm2-135m not installed";
  JsonSchemaOptions o;
  o.max_string_length = 512;  // the server's default: every string position is a state
  auto g = json_schema_grammar(oj::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})"), o);
  GrammarLimits lim;
  lim.max_states = 256;
  lim.max_nodes = 1u << 14;
  TokenGrammar t(g, v->trie, lim);
  std::mt19937 rng(5);
  std::vector<uint8_t> allowed;
  int steps = 0;
  for (; steps < 1500 && !t.finished(); ++steps) {
    t.mask(allowed);
    std::vector<int32_t> ok;
    for (int32_t id = 0; id < v->trie->n_vocab(); ++id)
      if (allowed[static_cast<size_t>(id)] && v->trie->in_trie(id) &&
          v->trie->bytes(id).find('}') == std::string::npos)  // the object goes on
        ok.push_back(id);
    ASSERT_FALSE(ok.empty()) << "step " << steps;
    const int32_t id = ok[rng() % ok.size()];
    ASSERT_TRUE(t.accept(id)) << "step " << steps << ": the mask allowed '" << v->trie->bytes(id) << "'";
  }
  EXPECT_EQ(steps, 1500);
}

TEST(TokenGrammar, MaskCostPrinted) {
  const Vocab* v = vocab();
  if (!v) GTEST_SKIP() << "smollm2-135m not installed";
  JsonSchemaOptions pretty;
  pretty.whitespace = JsonSchemaOptions::Whitespace::kPretty;
  auto g = Grammar::parse(json_any_gbnf(true, pretty));
  TokenGrammar tg(g, v->trie);
  const std::string out = "{\"key\": [1, 2.5, \"some text here\", {\"x\": null, \"y\": true}], \"z\": \"end\"}";
  const std::vector<int32_t> ids = v->tok->encode(out, false, false);
  std::vector<uint8_t> allowed;
  const std::clock_t c0 = std::clock();  // CPU time: the machine may be shared
  for (int32_t id : ids) {
    tg.mask(allowed);
    ASSERT_TRUE(allowed[id]) << v->trie->bytes(id);
    ASSERT_TRUE(tg.accept(id));
  }
  const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  EXPECT_TRUE(tg.finished());
  std::printf("json_object mask over %d tokens (%zu trie nodes), %lld masks: %.1f us wall, %.1f us CPU per token\n",
              v->trie->n_vocab(), v->trie->nodes().size(), static_cast<long long>(tg.masks()),
              1e6 * tg.mask_seconds() / static_cast<double>(tg.masks()), 1e6 * cpu_s / static_cast<double>(tg.masks()));
}

}  // namespace
}  // namespace kvad
