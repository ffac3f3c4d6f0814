"""Tool calls through kvad serve with the official `openai` client on
SmolLM2-135M (its template does not read `tools`, so kvad describes them and
parses the generic JSON format): tool_choice required and named give calls
that parse, streamed and not, with unique ids and one index per call; a
tool-result round trip; auto may answer in text; bad tool requests get 400."""
import json

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME, Server, model_path  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module (each start and stop costs seconds)."""
    if model_path() is None:
        pytest.skip("model %s not installed (run scripts/setup)" % MODEL_NAME)
    s = Server(["--parallel", "2", "--ctx-size", "1024"], str(tmp_path_factory.mktemp("tools") / "server.log"))
    yield s
    s.stop()


_clients = {}


def client(server):
    if server.url not in _clients:
        _clients[server.url] = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    return _clients[server.url]


def check_call(call, name):
    assert call.type == "function"
    assert call.id.startswith("call_") and len(call.id) > 10
    assert call.function.name == name
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict)
    return args


@pytest.mark.parametrize("choice,tools", [("required", [WEATHER]),
                                          ({"type": "function", "function": {"name": "get_weather"}}, [WEATHER, TIME])])
def test_forced_call_not_streamed(server, choice, tools):
    r = client(server).chat.completions.create(model=MODEL_NAME, messages=ASK, tools=tools,
                                               tool_choice=choice, temperature=0, max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    calls = ch.message.tool_calls
    assert len(calls) >= 1
    args = check_call(calls[0], "get_weather")
    assert args.get("city") == "Paris"  # SmolLM2 at temperature 0: validates against the schema
    assert len({c.id for c in calls}) == len(calls)


def test_forced_call_streamed_matches(server):
    c = client(server)
    kw = dict(model=MODEL_NAME, messages=ASK, tools=[WEATHER, TIME], temperature=0, max_tokens=60,
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    full = c.chat.completions.create(**kw)
    chunks = list(c.chat.completions.create(stream=True, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    calls = {}
    for k in chunks:
        for d in (k.choices[0].delta.tool_calls or []) if k.choices else []:
            if d.index not in calls:
                # The first delta of a call: index, id, type, name, empty arguments.
                assert d.id.startswith("call_") and d.type == "function"
                assert d.function.name and d.function.arguments == ""
                calls[d.index] = {"id": d.id, "name": d.function.name, "args": ""}
            else:
                assert d.id is None
                calls[d.index]["args"] += d.function.arguments or ""
        assert not (k.choices and k.choices[0].delta.content)  # no tool-call text in content
    assert sorted(calls) == list(range(len(calls)))
    assert [v["name"] for v in calls.values()] == [t.function.name for t in full.choices[0].message.tool_calls]
    assert [json.loads(v["args"]) for v in calls.values()] == [
        json.loads(t.function.arguments) for t in full.choices[0].message.tool_calls]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_result_round_trip_and_auto(server):
    c = client(server)
    r = c.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice="required",
                                  temperature=0, max_tokens=60)
    call = r.choices[0].message.tool_calls[0]
    msgs = ASK + [r.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"}]
    r2 = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=[WEATHER], tool_choice="none",
                                   temperature=0, max_tokens=30)
    assert r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content
    # auto: the model may answer in text; whatever it does, the answer is well-formed.
    r3 = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hello."}],
                                   tools=[WEATHER], temperature=0, max_tokens=20)
    ch = r3.choices[0]
    if ch.message.tool_calls:
        assert ch.finish_reason == "tool_calls"
    else:
        assert ch.finish_reason in ("stop", "length") and ch.message.content


UNITS = {"type": "function", "function": {
    "name": "convert", "description": "Convert an amount between units",
    "parameters": {"type": "object", "properties": {
        "amount": {"type": "number", "minimum": 0},
        "unit": {"type": "string", "enum": ["km", "mi", "m"]},
        "precise": {"type": "boolean"}},
        "required": ["amount", "unit"], "additionalProperties": False}}}


@pytest.mark.parametrize("stream", [False, True])
def test_forced_calls_are_decoded_under_a_grammar(server, stream):
    # tool_choice required / named decode under a grammar built from the
    # functions' parameters: at temperature 1.5, over many seeds, every reply
    # is one call of an allowed function whose arguments validate.
    jsonschema = pytest.importorskip("jsonschema")
    c = client(server)

    def strict(tool):  # as OpenAI's strict mode writes them: no extra keys, bounded strings
        t = json.loads(json.dumps(tool))
        p = t["function"]["parameters"]
        p["additionalProperties"] = False
        for v in p["properties"].values():
            if v.get("type") == "string" and "enum" not in v:
                v["maxLength"] = 30
        return t
    weather, time_, units = strict(WEATHER), strict(TIME), strict(UNITS)
    specs = {t["function"]["name"]: t["function"]["parameters"] for t in (weather, time_, units)}
    cases = [("required", [weather, time_, units]),
             ({"type": "function", "function": {"name": "convert"}}, [weather, units])]
    for choice, tools in cases:
        for seed in range(6 if not stream else 3):
            kw = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Convert 5 miles to km, please."}],
                      tools=tools, tool_choice=choice, temperature=1.5, seed=seed, max_tokens=200)
            if stream:
                name, args = None, ""
                for k in c.chat.completions.create(stream=True, **kw):
                    for d in (k.choices[0].delta.tool_calls or []) if k.choices else []:
                        name = name or d.function.name
                        args += d.function.arguments or ""
                    if k.choices and k.choices[0].finish_reason:
                        assert k.choices[0].finish_reason == "tool_calls"
            else:
                r = c.chat.completions.create(**kw)
                assert r.choices[0].finish_reason == "tool_calls", r
                call = r.choices[0].message.tool_calls[0]
                name, args = call.function.name, call.function.arguments
            allowed = [t["function"]["name"] for t in tools] if choice == "required" else ["convert"]
            assert name in allowed, (choice, seed, name)
            jsonschema.validate(json.loads(args), specs[name])


def test_forced_call_with_a_schema_the_grammar_cannot_enforce_is_400(server):
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"(?!x)": {"type": "integer"}}}}}
    with pytest.raises(openai.BadRequestError) as e:
        client(server).chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[bad], tool_choice="required",
                                               max_tokens=4)
    assert e.value.code == "invalid_schema" and e.value.param == "tools[0].function.parameters"
    assert "patternProperties" in e.value.message


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tools": {"a": 1}}, "tools"),
])
def test_bad_tool_requests_are_400(server, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        client(server).chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=4, **body)
    assert e.value.body["param"] == param


# Few-shot turns that make SmolLM2 open its reply with <think>...</think>.
THINK = [{"role": "system", "content": "Always answer as <think>your reasoning</think> followed by the answer."},
         {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "<think>2 plus 2 is 4.</think>4"},
         {"role": "user", "content": "What is 3+3?"}, {"role": "assistant", "content": "<think>3 plus 3 is 6.</think>6"},
         {"role": "user", "content": "What is 5+5?"}]


def test_reasoning_content(server):
    c = client(server)
    r = c.chat.completions.create(model=MODEL_NAME, messages=THINK, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert m.reasoning_content == "5 plus 5 is 10."  # attribute from the JSON (DeepSeek's field)
    assert "think>" not in m.content and "10" in m.content
    chunks = list(c.chat.completions.create(model=MODEL_NAME, messages=THINK, temperature=0, max_tokens=40, stream=True))
    deltas = [k.choices[0].delta for k in chunks if k.choices]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    assert reasoning == m.reasoning_content and content == m.content
    raw = c.chat.completions.create(model=MODEL_NAME, messages=THINK, temperature=0, max_tokens=40,
                                    extra_body={"reasoning_format": "none"})
    assert raw.choices[0].message.content == "<think>5 plus 5 is 10.</think>" + m.content
    assert getattr(raw.choices[0].message, "reasoning_content", None) is None


@pytest.mark.parametrize("stream", [False, True])
def test_forced_call_cut_off_by_max_tokens_ends_length(server, stream):
    # Not a 500: the reply ends "length" with neither a partial call nor its text as content.
    kw = dict(model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=3)
    if not stream:
        r = client(server).chat.completions.create(**kw)
        assert r.choices[0].finish_reason == "length"
        assert not r.choices[0].message.content and not r.choices[0].message.tool_calls
        return
    finish, content = None, ""
    for k in client(server).chat.completions.create(stream=True, **kw):
        if k.choices:
            content += k.choices[0].delta.content or ""
            finish = k.choices[0].finish_reason or finish
    assert finish == "length" and content == ""
