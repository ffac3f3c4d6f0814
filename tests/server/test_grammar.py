"""Constrained output through kvad serve with the official `openai` client:
response_format json_schema / json_object and llama.cpp's `grammar`, on
SmolLM2 at temperature 1.5 over several seeds; every output is validated by
the `jsonschema` package (Draft 2020-12, formats asserted). Schemas the
compiler cannot enforce are a 400 naming the keyword."""
import concurrent.futures
import json

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")
jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema package is missing (run scripts/setup)")

from conftest import MODEL_NAME, Server, model_path  # noqa: E402

SCHEMA = {
    "$defs": {
        "pet": {
            "type": "object",
            "properties": {
                "kind": {"enum": ["cat", "dog", "fish"]},
                "name": {"type": "string", "minLength": 1, "maxLength": 12},
            },
            "required": ["kind", "name"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "born": {"type": "string", "format": "date"},
        "height_m": {"type": "number", "minimum": 0, "maximum": 3},
        "member": {"type": "boolean"},
        "pets": {"type": "array", "items": {"$ref": "#/$defs/pet"}, "maxItems": 2},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
    },
    "required": ["name", "age", "born", "pets", "code"],
    "additionalProperties": False,
}


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def validate(text, schema):
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(value)
    return value


@pytest.fixture(scope="module")
def gserver(tmp_path_factory):
    """One server for the module (4 slots of 1024 tokens): the requests here
    leave nothing behind that another test could see."""
    if model_path() is None:
        pytest.skip("model %s not installed (run scripts/setup)" % MODEL_NAME)
    s = Server(["--parallel", "4", "--ctx-size", "1024"], str(tmp_path_factory.mktemp("grammar") / "server.log"))
    yield s
    s.stop()


def test_json_schema_at_high_temperature_always_validates(gserver):
    c = client(gserver)
    msgs = [{"role": "user", "content": "Describe a person and their pets as JSON."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}

    def run(seed):
        r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, temperature=1.5, seed=seed, max_tokens=400,
                                      response_format=fmt)
        return r.choices[0]

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        choices = list(ex.map(run, range(1, 9)))
    for ch in choices:
        assert ch.finish_reason == "stop", ch.message.content
        validate(ch.message.content, SCHEMA)


def test_json_schema_streamed(gserver):
    c = client(gserver)
    msgs = [{"role": "user", "content": "A person as JSON."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    text, finish = "", None
    for k in c.chat.completions.create(model=MODEL_NAME, messages=msgs, temperature=1.0, seed=3, max_tokens=400,
                                       response_format=fmt, stream=True):
        if k.choices and k.choices[0].delta.content:
            text += k.choices[0].delta.content
        if k.choices and k.choices[0].finish_reason:
            finish = k.choices[0].finish_reason
    assert finish == "stop"
    validate(text, SCHEMA)


def test_json_object(gserver):
    c = client(gserver)
    r = c.chat.completions.create(model=MODEL_NAME, temperature=1.2, seed=7, max_tokens=300,
                                  messages=[{"role": "user", "content": "Give me a JSON object about Paris."}],
                                  response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # an object can be unbounded; what there is must be its beginning
        assert r.choices[0].message.content.startswith("{")


def test_grammar_field_on_completions(gserver):
    c = client(gserver)
    r = c.completions.create(model=MODEL_NAME, prompt="The answer is", max_tokens=20, temperature=1.5, seed=1,
                             extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
    assert r.choices[0].text in (" yes.", " no.")
    assert r.choices[0].finish_reason == "stop"


# Schemas of the shapes Pydantic, Zod and OpenAPI write (discriminated
# unions, if/then/else on a discriminator, not, contains, uniqueItems over an
# enum, property counts and dependencies), each at temperature 1.5 over
# several seeds: every reply ends with "stop" and validates.
MORE_SCHEMAS = [
    {"$defs": {
        "Cat": {"type": "object", "properties": {"pet_type": {"const": "cat"}, "meows": {"type": "integer",
                                                                                      "minimum": 0, "maximum": 9}},
                "required": ["pet_type", "meows"], "additionalProperties": False},
        "Dog": {"type": "object", "properties": {"pet_type": {"const": "dog"}, "barks": {"type": "number"}},
                "required": ["pet_type", "barks"], "additionalProperties": False}},
     "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]},
    {"type": "object", "properties": {"country": {"enum": ["US", "FR"]}, "code": {"type": "string"}},
     "required": ["country", "code"], "additionalProperties": False,
     "if": {"properties": {"country": {"const": "US"}}},
     "then": {"properties": {"code": {"pattern": "^[0-9]{5}$"}}},
     "else": {"properties": {"code": {"pattern": "^[A-Z]{2}$"}}}},
    {"type": "object", "properties": {
        "colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "uniqueItems": True, "minItems": 1},
        "ids": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "contains": {"const": 7},
                "maxContains": 1, "maxItems": 8},
        "name": {"type": "string", "not": {"enum": ["admin", "root"]}, "maxLength": 16}},
     "required": ["colors", "ids", "name"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
     "minProperties": 1, "maxProperties": 2, "dependentRequired": {"a": ["b"]},
     "additionalProperties": {"type": "number"}},
    {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,12}$"}, "maxProperties": 4,
     "additionalProperties": {"type": "array", "items": {"type": "number"}, "maxItems": 4}},
]


@pytest.mark.parametrize("schema", MORE_SCHEMAS)
def test_more_keywords_at_high_temperature_always_validate(gserver, schema):
    c = client(gserver)
    msgs = [{"role": "user", "content": "Answer with JSON."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}

    def run(seed):
        r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, temperature=1.5, seed=seed, max_tokens=400,
                                      response_format=fmt)
        return r.choices[0]

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        choices = list(ex.map(run, range(1, 5)))
    for ch in choices:
        assert ch.finish_reason == "stop", ch.message.content
        validate(ch.message.content, schema)


def test_json_whitespace_compact_by_default_pretty_on_request(gserver):
    c = client(gserver)
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}, "maxItems": 6}},
              "required": ["items"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    msgs = [{"role": "user", "content": "A JSON object with a list of numbers."}]
    texts = {}
    for ws in (None, "compact", "pretty"):
        extra = {"kvad": {"json_whitespace": ws}} if ws else None
        outs = []
        for seed in range(1, 4):
            r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, temperature=1.0, seed=seed, max_tokens=200,
                                          response_format=fmt, extra_body=extra)
            assert r.choices[0].finish_reason == "stop"
            validate(r.choices[0].message.content, schema)
            outs.append(r.choices[0].message.content)
        texts[ws] = outs
    for t in texts[None] + texts["compact"]:
        assert not any(ch in t for ch in " \n\t\r"), t  # no whitespace outside strings, and none inside here
    for t in texts["pretty"]:
        assert "  \n" not in t and "\n\n" not in t, t
    # json_object follows the same option; a bad value is a 400 naming the field.
    r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "JSON please."}],
                                  temperature=1.0, seed=1, max_tokens=100, response_format={"type": "json_object"})
    assert r.choices[0].message.content.startswith("{")
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=4, response_format=fmt,
                                  extra_body={"kvad": {"json_whitespace": "wide"}})
    assert "kvad.json_whitespace" in str(e.value)


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "patternProperties": {"(?=a)": {"type": "string"}}}, "patternProperties"),  # lookahead
    ({"not": {"type": "string", "pattern": "^a"}}, "not"),
    ({"$ref": "#/$defs/missing"}, "$ref"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "minimum"),
    ({"type": "string", "enum": []}, "enum"),
])
def test_unenforceable_schema_is_400_naming_the_keyword(gserver, schema, keyword):
    c = client(gserver)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                  response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert "'" + keyword + "'" in str(e.value)
    assert e.value.body["code"] == "invalid_schema"


def test_bad_grammar_is_400(gserver):
    c = client(gserver)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=MODEL_NAME, prompt="x", max_tokens=4, extra_body={"grammar": "root ::= ("})
    assert e.value.body["code"] == "invalid_grammar"
    # Parses, but matches nothing: found at the first token, still the client's 400.
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=MODEL_NAME, prompt="x", max_tokens=4,
                             extra_body={"grammar": "root ::= [^\\x00-\\U0010FFFF]"})
    assert e.value.body["code"] == "invalid_grammar"
    # The server keeps serving.
    r = c.completions.create(model=MODEL_NAME, prompt="x", max_tokens=2, extra_body={"grammar": 'root ::= "ok"'})
    assert r.choices[0].text == "ok"
