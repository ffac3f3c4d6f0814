// The JSON Schema keywords compiled by rewriting and counting (not, if/then/
// else, oneOf over overlapping branches, contains, uniqueItems over finite
// values, min/maxProperties, dependentRequired, propertyNames, $anchor), the
// bounds refused before compiling, whitespace and digit bounds, and
// mutated schemas of the JSON-Schema-Test-Suite that must compile or fail
// with a SchemaError. The suite itself (test_json_schema_suite) is the
// reference for the semantics; the instances here are the shapes real
// tool schemas have (Pydantic's and OpenAPI's discriminated unions).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/json_schema_uri.h"

namespace kvad {
namespace {

using oj = nlohmann::ordered_json;

bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept(text) && m.accepting();
}

std::shared_ptr<const Grammar> compile(const char* schema, JsonSchemaOptions opt = {}) {
  return json_schema_grammar(oj::parse(schema), opt);
}

std::string refused_keyword(const char* schema) {
  try {
    json_schema_grammar(oj::parse(schema));
  } catch (const SchemaError& e) {
    return e.keyword;
  }
  return "(compiled)";
}

TEST(JsonSchemaKeywords, WhitespaceCompactAndPretty) {
  const char* s = R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}})";
  auto compact = compile(s);
  EXPECT_TRUE(accepts(compact, R"({"a":[1,2]})"));
  EXPECT_FALSE(accepts(compact, R"({"a": [1,2]})"));
  EXPECT_FALSE(accepts(compact, "{\n\"a\":[1]}"));
  JsonSchemaOptions p;
  p.whitespace = JsonSchemaOptions::Whitespace::kPretty;
  auto pretty = compile(s, p);
  EXPECT_TRUE(accepts(pretty, R"({"a":[1,2]})"));
  EXPECT_TRUE(accepts(pretty, R"({"a": [1, 2]})"));
  EXPECT_TRUE(accepts(pretty, "{\n  \"a\": [\n    1,\n    2\n  ]\n}"));  // json.dumps(indent=2)
  EXPECT_FALSE(accepts(pretty, "{  \"a\": [1]}"));                     // two spaces
  EXPECT_FALSE(accepts(pretty, "{\n\n\"a\": [1]}"));                   // two newlines
  EXPECT_FALSE(accepts(pretty, "{\n" + std::string(21, ' ') + "\"a\": [1]}"));  // indent over 20
  EXPECT_FALSE(accepts(pretty, " {\"a\": [1]}"));                      // none before the value
}

TEST(JsonSchemaKeywords, DigitsAreBoundedUnlessTheBoundsNeedMore) {
  auto integer = compile(R"({"type": "integer"})");
  EXPECT_TRUE(accepts(integer, std::string(16, '9')));
  EXPECT_FALSE(accepts(integer, std::string(17, '9')));
  EXPECT_TRUE(accepts(integer, "-9007199254740993"));
  EXPECT_TRUE(accepts(integer, "3.0"));
  EXPECT_FALSE(accepts(integer, "3." + std::string(17, '0')));
  auto number = compile(R"({"type": "number"})");
  EXPECT_TRUE(accepts(number, "0." + std::string(16, '1')));
  EXPECT_FALSE(accepts(number, "0." + std::string(17, '1')));
  EXPECT_TRUE(accepts(number, "1e+308"));
  EXPECT_FALSE(accepts(number, "1e+3080"));
  // Bounds beyond 16 digits: the digits they allow.
  auto big = compile(R"({"type": "integer", "minimum": 100000000000000000})");
  EXPECT_TRUE(accepts(big, "100000000000000000"));
  EXPECT_TRUE(accepts(big, "999999999999999999"));
  EXPECT_FALSE(accepts(big, "99999999999999999"));
  auto frac = compile(R"({"type": "number", "minimum": 0, "maximum": 1})");
  EXPECT_TRUE(accepts(frac, "0." + std::string(16, '5')));
  EXPECT_FALSE(accepts(frac, "0." + std::string(40, '5')));
  EXPECT_FALSE(accepts(frac, "1.5"));
}

TEST(JsonSchemaKeywords, DefaultMaxLengthNeverTighterThanTheSchema) {
  JsonSchemaOptions o;
  o.max_string_length = 8;
  auto plain = compile(R"({"type": "string"})", o);
  EXPECT_TRUE(accepts(plain, "\"12345678\""));
  EXPECT_FALSE(accepts(plain, "\"123456789\""));
  auto longer = compile(R"({"type": "string", "minLength": 12})", o);
  EXPECT_TRUE(accepts(longer, "\"123456789012\""));
  EXPECT_FALSE(accepts(longer, "\"1234567890123\""));
  auto given = compile(R"({"type": "string", "maxLength": 20})", o);
  EXPECT_TRUE(accepts(given, "\"12345678901234567890\""));
}

TEST(JsonSchemaKeywords, BoundsThatAllowNothingAreRefusedAtCompileTime) {
  EXPECT_EQ(refused_keyword(R"({"type": "integer", "minimum": 5, "maximum": 2})"), "minimum");
  EXPECT_EQ(refused_keyword(R"({"exclusiveMinimum": 2, "maximum": 2})"), "exclusiveMinimum");
  EXPECT_EQ(refused_keyword(R"({"properties": {"a": {"minItems": 3, "maxItems": 1}}})"), "minItems");
  EXPECT_EQ(refused_keyword(R"({"minLength": 3, "maxLength": 1})"), "minLength");
  EXPECT_EQ(refused_keyword(R"({"$defs": {"x": {"enum": []}}, "type": "string"})"), "enum");
  EXPECT_EQ(refused_keyword(R"({"minProperties": 2, "maxProperties": 1})"), "minProperties");
  EXPECT_EQ(refused_keyword(R"({"type": "integer", "minimum": 2, "maximum": 2})"), "(compiled)");
}

// A discriminated union as Pydantic writes it: oneOf over $refs whose
// "kind" const tells them apart (the branches overlap otherwise).
TEST(JsonSchemaKeywords, OneOfWithDiscriminator) {
  auto g = compile(R"({
    "$defs": {
      "Cat": {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
              "required": ["kind"]},
      "Dog": {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
              "required": ["kind"]}},
    "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]})");
  EXPECT_TRUE(accepts(g, R"({"kind":"cat","lives":9})"));
  EXPECT_TRUE(accepts(g, R"({"kind":"dog","good":true})"));
  EXPECT_FALSE(accepts(g, R"({"kind":"dog","good":3})"));
  EXPECT_FALSE(accepts(g, R"({"kind":"cow"})"));
  EXPECT_FALSE(accepts(g, R"({"lives":9})"));
}

// oneOf over overlapping branches: exactly one holds.
TEST(JsonSchemaKeywords, OneOfOverlappingBranchesExactlyOne) {
  auto g = compile(R"({"type": "string", "oneOf": [{"minLength": 2}, {"maxLength": 4}]})");
  EXPECT_TRUE(accepts(g, "\"a\""));       // only the second
  EXPECT_TRUE(accepts(g, "\"abcdef\""));  // only the first
  EXPECT_FALSE(accepts(g, "\"abc\""));    // both
}

TEST(JsonSchemaKeywords, IfThenElseOnADiscriminator) {
  auto g = compile(R"({"type": "object",
    "properties": {"country": {"enum": ["US", "FR"]}, "zip": {"type": "string"}},
    "required": ["country", "zip"],
    "if": {"properties": {"country": {"const": "US"}}},
    "then": {"properties": {"zip": {"pattern": "^[0-9]{5}$"}}},
    "else": {"properties": {"zip": {"pattern": "^[0-9]{5}$|^[A-Z]"}}}})");
  EXPECT_TRUE(accepts(g, R"({"country":"US","zip":"12345"})"));
  EXPECT_FALSE(accepts(g, R"({"country":"US","zip":"A1"})"));
  EXPECT_TRUE(accepts(g, R"({"country":"FR","zip":"A1"})"));
  EXPECT_FALSE(accepts(g, R"({"country":"FR","zip":"a1"})"));
}

TEST(JsonSchemaKeywords, NotOverTypesConstsAndEnums) {
  auto g = compile(R"({"not": {"type": ["string", "object"]}})");
  EXPECT_TRUE(accepts(g, "1"));
  EXPECT_TRUE(accepts(g, "[\"x\"]"));
  EXPECT_FALSE(accepts(g, "\"x\""));
  EXPECT_FALSE(accepts(g, "{}"));
  auto s = compile(R"({"type": "string", "not": {"enum": ["red", "green"]}})");
  EXPECT_TRUE(accepts(s, "\"blue\""));
  EXPECT_TRUE(accepts(s, "\"re\""));
  EXPECT_TRUE(accepts(s, "\"reds\""));
  EXPECT_FALSE(accepts(s, "\"red\""));
  EXPECT_FALSE(accepts(s, "\"green\""));
  auto len = compile(R"({"type": "string", "minLength": 2, "maxLength": 4, "not": {"enum": ["red", "ab"]}})");
  EXPECT_TRUE(accepts(len, "\"re\""));
  EXPECT_TRUE(accepts(len, "\"reds\""));
  EXPECT_TRUE(accepts(len, "\"abc\""));
  EXPECT_FALSE(accepts(len, "\"red\""));
  EXPECT_FALSE(accepts(len, "\"ab\""));
  EXPECT_FALSE(accepts(len, "\"r\""));
  EXPECT_FALSE(accepts(len, "\"redss\""));
  auto i = compile(R"({"type": "integer", "not": {"const": 0}})");
  EXPECT_TRUE(accepts(i, "-1"));
  EXPECT_TRUE(accepts(i, "10"));
  EXPECT_FALSE(accepts(i, "0"));
  EXPECT_FALSE(accepts(i, "0.0"));
  auto ib = compile(R"({"type": "integer", "minimum": 0, "exclusiveMaximum": 10, "not": {"enum": [0, 5, 12]}})");
  for (int v = -2; v < 14; ++v)
    EXPECT_EQ(accepts(ib, std::to_string(v)), v > 0 && v < 10 && v != 5) << v;
  auto n = compile(R"({"not": {"type": "integer"}})");
  EXPECT_TRUE(accepts(n, "1.5"));
  EXPECT_FALSE(accepts(n, "1"));
  EXPECT_FALSE(accepts(n, "1.0"));
  EXPECT_EQ(refused_keyword(R"({"not": {"pattern": "^a"}})"), "not");
}

TEST(JsonSchemaKeywords, ContainsWithCounts) {
  auto g = compile(R"({"type": "array", "items": {"type": "integer"}, "contains": {"const": 1},
                       "minContains": 2, "maxContains": 3})");
  EXPECT_TRUE(accepts(g, "[1,1]"));
  EXPECT_TRUE(accepts(g, "[2,1,3,1,1,4]"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, "[1,1,1,1]"));
  EXPECT_FALSE(accepts(g, "[1,1,\"x\"]"));
  auto counted = compile(R"({"type": "array", "contains": {"type": "string"}, "maxContains": 1, "minItems": 2,
                            "maxItems": 3})");
  EXPECT_TRUE(accepts(counted, R"(["a",1])"));
  EXPECT_FALSE(accepts(counted, "[1,2,3]"));  // minContains is 1 by default
  EXPECT_TRUE(accepts(counted, R"([1,"a",3])"));
  EXPECT_FALSE(accepts(counted, R"(["a"])"));
  EXPECT_FALSE(accepts(counted, R"(["a","b"])"));
  EXPECT_FALSE(accepts(counted, "[1,2,3,4]"));
  // "At least one" needs no negation of the contains schema.
  auto any = compile(R"({"contains": {"type": "string", "pattern": "^x"}})");
  EXPECT_TRUE(accepts(any, R"([1,"xa",2])"));
  EXPECT_FALSE(accepts(any, R"([1,"ax"])"));
  EXPECT_TRUE(accepts(any, "\"not an array\""));
}

TEST(JsonSchemaKeywords, UniqueItemsOverFiniteValues) {
  auto g = compile(R"({"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": true, "minItems": 1})");
  EXPECT_TRUE(accepts(g, R"(["a"])"));
  EXPECT_TRUE(accepts(g, R"(["c","a","b"])"));
  EXPECT_FALSE(accepts(g, R"(["a","a"])"));
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, R"(["a","b","c","a"])"));
  EXPECT_EQ(refused_keyword(R"({"items": {"type": "string"}, "uniqueItems": true})"), "uniqueItems");
}

TEST(JsonSchemaKeywords, PropertyCountsAndDependencies) {
  auto g = compile(R"({"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
                       "minProperties": 1, "maxProperties": 2, "dependentRequired": {"a": ["b"]}})");
  EXPECT_TRUE(accepts(g, R"({"b":1})"));
  EXPECT_TRUE(accepts(g, R"({"a":1,"b":2})"));
  EXPECT_TRUE(accepts(g, R"({"c":1,"x":2})"));
  EXPECT_FALSE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, R"({"a":1})"));
  EXPECT_FALSE(accepts(g, R"({"a":1,"c":2})"));
  EXPECT_FALSE(accepts(g, R"({"b":1,"c":2,"x":3})"));
  JsonSchemaOptions any;
  any.key_order = JsonSchemaOptions::KeyOrder::kAny;
  auto ga = compile(R"({"properties": {"a": {}, "b": {}}, "dependentRequired": {"b": ["a"]}})", any);
  EXPECT_TRUE(accepts(ga, R"({"b":1,"a":2})"));
  EXPECT_FALSE(accepts(ga, R"({"b":1})"));
}

TEST(JsonSchemaKeywords, DependentSchemas) {
  auto g = compile(R"({"properties": {"card": {"type": "string"}},
                       "dependentSchemas": {"card": {"required": ["billing"]}}})");
  EXPECT_TRUE(accepts(g, R"({"x":1})"));
  EXPECT_TRUE(accepts(g, R"({"card":"1234","billing":"here"})"));
  EXPECT_FALSE(accepts(g, R"({"card":"1234"})"));
  EXPECT_TRUE(accepts(g, "\"not an object\""));
}

TEST(JsonSchemaKeywords, PropertyNamesAndAnchors) {
  auto n = compile(R"({"type": "object", "propertyNames": {"maxLength": 2}})");
  EXPECT_TRUE(accepts(n, R"({"ab":1,"c":2})"));
  EXPECT_FALSE(accepts(n, R"({"abc":1})"));
  auto p = compile(R"({"type": "object", "properties": {"Big": {}}, "propertyNames": {"pattern": "^[a-z]+$"}})");
  EXPECT_TRUE(accepts(p, R"({"ok":1})"));
  EXPECT_FALSE(accepts(p, R"({"Big":1})"));  // declared, but not an allowed name
  auto a = compile(R"({"$ref": "#item", "$defs": {"x": {"$anchor": "item", "type": "integer", "maximum": 3}}})");
  EXPECT_TRUE(accepts(a, "3"));
  EXPECT_FALSE(accepts(a, "4"));
}

// RFC 3986 §5.4's reference resolution examples (normal and abnormal).
TEST(JsonSchemaKeywords, UriResolutionAsRfc3986) {
  const std::string b = "http://a/b/c/d;p?q";
  const std::pair<const char*, const char*> cases[] = {
      {"g:h", "g:h"}, {"g", "http://a/b/c/g"}, {"./g", "http://a/b/c/g"}, {"g/", "http://a/b/c/g/"},
      {"/g", "http://a/g"}, {"//g", "http://g"}, {"?y", "http://a/b/c/d;p?y"}, {"g?y", "http://a/b/c/g?y"},
      {"#s", "http://a/b/c/d;p?q#s"}, {"g#s", "http://a/b/c/g#s"}, {";x", "http://a/b/c/;x"}, {"", b.c_str()},
      {".", "http://a/b/c/"}, {"./", "http://a/b/c/"}, {"..", "http://a/b/"}, {"../", "http://a/b/"},
      {"../g", "http://a/b/g"}, {"../..", "http://a/"}, {"../../g", "http://a/g"}, {"../../../g", "http://a/g"},
      {"/./g", "http://a/g"}, {"/../g", "http://a/g"}, {"g.", "http://a/b/c/g."}, {"..g", "http://a/b/c/..g"},
      {"./../g", "http://a/b/g"}, {"g/./h", "http://a/b/c/g/h"}, {"g/../h", "http://a/b/c/h"},
      {"g;x=1/../y", "http://a/b/c/y"}, {"g?y/./x", "http://a/b/c/g?y/./x"}, {"g#s/../x", "http://a/b/c/g#s/../x"}};
  for (auto [ref, want] : cases) EXPECT_EQ(schema_uri::resolve(b, ref), want) << ref;
  EXPECT_EQ(schema_uri::resolve("urn:uuid:deadbeef-1234-ffff-ffff-4321feebdaed", "#/$defs/bar"),
            "urn:uuid:deadbeef-1234-ffff-ffff-4321feebdaed#/$defs/bar");
}

// References resolved against the $id of the resource they are written in.
TEST(JsonSchemaKeywords, ReferencesAgainstIdBaseUris) {
  // An embedded resource's "#/..." is its own, not the root's.
  auto e = compile(R"({"$id": "http://example.com/root.json", "$defs": {"x": {"type": "string"}},
    "properties": {"a": {"$ref": "item.json"}},
    "$comment": "item.json below",
    "allOf": [{"$defs": {"item": {"$id": "item.json", "$ref": "#/$defs/x", "$defs": {"x": {"type": "integer"}}}}}]})");
  EXPECT_TRUE(accepts(e, R"({"a":1})"));
  EXPECT_FALSE(accepts(e, R"({"a":"s"})"));
  // An anchor of another resource, by absolute URI.
  auto a = compile(R"({"$ref": "http://example.com/b.json#n",
    "$defs": {"b": {"$id": "http://example.com/b.json", "$defs": {"n": {"$anchor": "n", "type": "null"}}}}})");
  EXPECT_TRUE(accepts(a, "null"));
  EXPECT_FALSE(accepts(a, "1"));
  // Outside the document: refused, naming $ref.
  EXPECT_EQ(refused_keyword(R"({"$ref": "http://example.com/other.json"})"), "$ref");
  EXPECT_EQ(refused_keyword(R"({"$ref": "https://json-schema.org/draft/2020-12/schema"})"), "$ref");
}

// A declared name that needs escapes, next to additional properties: no
// other spelling of it passes as an additional key.
TEST(JsonSchemaKeywords, EscapedNamesNextToAdditionalProperties) {
  auto g = compile(R"({"properties": {"a\nb": {"type": "integer"}, "q\"": {"type": "null"}},
                       "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(accepts(g, R"({"a\nb":1})"));
  EXPECT_FALSE(accepts(g, R"({"a\nb":"s"})"));
  EXPECT_FALSE(accepts(g, R"({"a\u000ab":"s"})"));  // the same key, spelled otherwise
  EXPECT_FALSE(accepts(g, R"({"a\u000Ab":"s"})"));
  EXPECT_TRUE(accepts(g, R"({"a\tb":"s"})"));  // another key
  EXPECT_TRUE(accepts(g, R"({"a\u000bb":"s"})"));
  EXPECT_FALSE(accepts(g, R"({"q\"":"s"})"));
  EXPECT_TRUE(accepts(g, R"({"q\"":null,"q\\":"s"})"));
}

// allOf of two multipleOf: multiples of their least common multiple.
TEST(JsonSchemaKeywords, MultipleOfInAllOfIsTheLeastCommonMultiple) {
  auto g = compile(R"({"type": "integer", "allOf": [{"multipleOf": 2}, {"multipleOf": 3}]})");
  EXPECT_TRUE(accepts(g, "12"));
  EXPECT_TRUE(accepts(g, "-18"));
  EXPECT_FALSE(accepts(g, "4"));
  EXPECT_FALSE(accepts(g, "9"));
  auto d = compile(R"({"allOf": [{"multipleOf": 0.5}, {"multipleOf": 0.2}]})");  // 1
  EXPECT_TRUE(accepts(d, "3"));
  EXPECT_FALSE(accepts(d, "0.5"));
  EXPECT_FALSE(accepts(d, "0.2"));
  auto f = compile(R"({"allOf": [{"multipleOf": 0.25}, {"multipleOf": 0.1}]})");  // 0.5
  EXPECT_TRUE(accepts(f, "1.5"));
  EXPECT_FALSE(accepts(f, "0.25"));
}

// patternProperties: each member follows every pattern its key matches,
// additionalProperties only where none does.
TEST(JsonSchemaKeywords, PatternProperties) {
  // OpenAPI's vendor extensions.
  auto x = compile(R"({"properties": {"name": {"type": "string"}}, "patternProperties": {"^x-": {}},
                       "additionalProperties": false})");
  EXPECT_TRUE(accepts(x, R"({"name":"a","x-tag":[1,2]})"));
  EXPECT_FALSE(accepts(x, R"({"name":"a","tag":1})"));
  EXPECT_FALSE(accepts(x, R"({"name":1})"));
  // Overlapping patterns: both hold; unanchored patterns match anywhere.
  auto o = compile(R"({"patternProperties": {"a": {"type": "integer"}, "b$": {"minimum": 10}},
                       "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(accepts(o, R"({"cat":1,"tab":12,"xyz":"s"})"));
  EXPECT_FALSE(accepts(o, R"({"tab":5})"));     // matches both: not >= 10
  EXPECT_FALSE(accepts(o, R"({"tab":12.5})"));  // matches both: not an integer
  EXPECT_TRUE(accepts(o, R"({"b":10.5})"));
  EXPECT_FALSE(accepts(o, R"({"xyz":1})"));
  EXPECT_FALSE(accepts(o, R"({"c\u0061t":"s"})"));  // "cat", spelled otherwise
  // A declared property that a pattern matches takes both schemas.
  auto d = compile(R"({"properties": {"ab": {"maximum": 3}}, "patternProperties": {"^a": {"minimum": 2}}})");
  EXPECT_TRUE(accepts(d, R"({"ab":3})"));
  EXPECT_FALSE(accepts(d, R"({"ab":1})"));
  EXPECT_FALSE(accepts(d, R"({"ab":4})"));
  EXPECT_TRUE(accepts(d, R"({"zz":1})"));
  // Keys no pattern lets close are never begun: only "{}" and "a" keys here.
  auto c = compile(R"({"patternProperties": {"^a$": {"type": "null"}}, "additionalProperties": false})");
  EXPECT_TRUE(accepts(c, R"({"a":null})"));
  EXPECT_FALSE(accepts(c, R"({"b":null})"));
  GrammarMatcher m(c);
  EXPECT_TRUE(m.accept("{\""));
  EXPECT_FALSE(m.accept("b"));
  EXPECT_EQ(refused_keyword(R"J({"patternProperties": {"(?=a)": {"type": "null"}}})J"), "patternProperties");
  // Automata past their bounds are refused, not built: 600 kinds of
  // character, and a pattern whose subset construction explodes.
  std::string many;
  for (int c = 0; c < 600; ++c) { char b[16]; std::snprintf(b, sizeof b, "\\u%04x", 0x400 + 2 * c); many += b; }
  EXPECT_EQ(refused_keyword(("{\"patternProperties\": {\"[" + many + "]\": {\"type\": \"null\"}}}").c_str()),
            "patternProperties");
  EXPECT_EQ(refused_keyword(R"({"patternProperties": {"a.{40}$": {"type": "null"}}})"), "patternProperties");
}

// max_items bounds arrays that give no maxItems, never below minItems,
// and beyond prefixItems.
TEST(JsonSchemaKeywords, DefaultMaxItems) {
  JsonSchemaOptions o;
  o.max_items = 3;
  auto a = compile(R"({"type": "array", "items": {"type": "integer"}})", o);
  EXPECT_TRUE(accepts(a, "[1,2,3]"));
  EXPECT_FALSE(accepts(a, "[1,2,3,4]"));
  auto m = compile(R"({"type": "array", "minItems": 5})", o);
  EXPECT_TRUE(accepts(m, "[1,2,3,4,5]"));
  EXPECT_FALSE(accepts(m, "[1,2,3,4,5,6]"));
  auto p = compile(R"({"prefixItems": [{"type": "null"}, {"type": "null"}], "items": {"type": "integer"}})", o);
  EXPECT_TRUE(accepts(p, "[null,null,1,2,3]"));
  EXPECT_FALSE(accepts(p, "[null,null,1,2,3,4]"));
  auto x = compile(R"({"type": "array", "maxItems": 10})", o);  // the schema's own bound wins
  EXPECT_TRUE(accepts(x, "[1,2,3,4,5,6,7,8,9,10]"));
}

// max_string_length bounds additional keys too, declared names or not.
TEST(JsonSchemaKeywords, DefaultMaxLengthBoundsAdditionalKeys) {
  JsonSchemaOptions o;
  o.max_string_length = 4;
  auto g = compile(R"({"type": "object", "additionalProperties": {"type": "integer"}})", o);
  EXPECT_TRUE(accepts(g, R"({"abcd":1})"));
  EXPECT_FALSE(accepts(g, R"({"abcde":1})"));
}

TEST(JsonSchemaKeywords, MoreFormats) {
  auto f = [](const std::string& format) {
    return json_schema_grammar(oj{{"type", "string"}, {"format", format}});
  };
  auto q = [](const std::string& text) { return oj(text).dump(); };
  auto uri = f("uri");
  for (const char* ok : {"https://example.com/a/b?c=1#d", "mailto:a@b.c", "urn:isbn:0451450523", "http://[::1]:8080/",
                         "file:///etc/hosts", "http://user:pw@host:1/"})
    EXPECT_TRUE(accepts(uri, q(ok))) << ok;
  for (const char* bad : {"//example.com", "example.com", "http://a b", "1http://x", "http://x:port/", "http://[x]/"})
    EXPECT_FALSE(accepts(uri, q(bad))) << bad;
  auto ref = f("uri-reference");
  EXPECT_TRUE(accepts(ref, q("../a?b")));
  EXPECT_TRUE(accepts(ref, q("#frag")));
  EXPECT_FALSE(accepts(ref, q("a b")));
  auto host = f("hostname");
  EXPECT_TRUE(accepts(host, q("api.eu.example.com")));
  EXPECT_FALSE(accepts(host, q("-a.com")));
  EXPECT_FALSE(accepts(host, q("a..b")));
  auto dur = f("duration");
  for (const char* ok : {"P1Y2M3DT4H5M6S", "PT1M", "P4W", "P1D"}) EXPECT_TRUE(accepts(dur, q(ok))) << ok;
  for (const char* bad : {"P", "PT", "P1H", "P1W2D", "1D"}) EXPECT_FALSE(accepts(dur, q(bad))) << bad;
  auto ptr = f("json-pointer");
  EXPECT_TRUE(accepts(ptr, q("/a~1b/~0/")));
  EXPECT_TRUE(accepts(ptr, q("")));
  EXPECT_FALSE(accepts(ptr, q("a")));
  EXPECT_FALSE(accepts(ptr, q("/~2")));
  auto rel = f("relative-json-pointer");
  EXPECT_TRUE(accepts(rel, q("1/a")));
  EXPECT_TRUE(accepts(rel, q("0#")));
  EXPECT_FALSE(accepts(rel, q("/a")));
  auto tpl = f("uri-template");
  EXPECT_TRUE(accepts(tpl, q("http://x/{id}{?q,lang:2}{/path*}")));
  EXPECT_FALSE(accepts(tpl, q("http://x/{id")));
  auto v6 = f("ipv6");
  EXPECT_TRUE(accepts(v6, q("2001:db8::ff00:42:8329")));
  EXPECT_FALSE(accepts(v6, q("2001:db8:::1")));
}

// Schemas of the suite with random edits (a keyword's value replaced by a
// value from elsewhere in the suite, or a keyword added to a subschema):
// each compiles to a grammar that runs, or is a SchemaError; never another
// exception. Deterministic (fixed seed).
TEST(JsonSchemaKeywords, MutatedSuiteSchemasCompileOrFailCleanly) {
  const char* env = std::getenv("KVAD_SOURCE_DIR");
  const std::string dir = std::string(env ? env : KVAD_SOURCE_DIR) + "/tests/fixtures/json_schema_suite";
  std::vector<oj> schemas, pool;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    for (const oj& g : oj::parse(ss.str())) {
      schemas.push_back(g["schema"]);
      std::vector<const oj*> todo{&g["schema"]};
      while (!todo.empty() && pool.size() < 4000) {
        const oj* x = todo.back();
        todo.pop_back();
        pool.push_back(*x);
        if (x->is_structured()) for (auto& y : *x) todo.push_back(&y);
      }
    }
  }
  ASSERT_GT(schemas.size(), 300u);
  const char* keywords[] = {"not", "if", "then", "else", "oneOf", "anyOf", "allOf", "contains", "minContains",
                            "maxContains", "uniqueItems", "minProperties", "maxProperties", "dependentRequired",
                            "propertyNames", "patternProperties", "properties", "required", "items", "prefixItems",
                            "enum", "const", "type", "minimum", "maximum", "minItems", "maxItems", "$ref", "$anchor"};
  std::mt19937 rng(20261202);
  int compiled = 0, refused = 0;
  for (int it = 0; it < 1500; ++it) {
    oj s = schemas[rng() % schemas.size()];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
      // A random object node of s.
      std::vector<oj*> objs;
      std::vector<oj*> todo{&s};
      while (!todo.empty()) {
        oj* x = todo.back();
        todo.pop_back();
        if (x->is_object()) objs.push_back(x);
        if (x->is_structured()) for (auto& y : *x) todo.push_back(&y);
      }
      if (objs.empty()) break;
      oj* at = objs[rng() % objs.size()];
      (*at)[keywords[rng() % std::size(keywords)]] = pool[rng() % pool.size()];
    }
    JsonSchemaOptions opt;
    if (rng() % 2) opt.whitespace = JsonSchemaOptions::Whitespace::kPretty;
    if (rng() % 2) opt.key_order = JsonSchemaOptions::KeyOrder::kAny;
    try {
      auto g = json_schema_grammar(s, opt);
      GrammarLimits lim;
      lim.max_stacks = 256;
      GrammarMatcher m(g, lim);
      (void)m.accept(s.dump());
      ++compiled;
    } catch (const SchemaError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("json schema:", 0), 0u) << e.what();
      ++refused;
    } catch (const GrammarError& e) {
      // A matcher past its caps on an ambiguous grammar: clean, but say so.
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << " for " << s.dump();
    }
  }
  std::printf("mutated schemas: %d compiled, %d refused\n", compiled, refused);
}

}  // namespace
}  // namespace kvad
