#!/usr/bin/env python3
"""Make chat-template fixtures for kvad's tests with Python's jinja2.

Usage:
    python3 tools/make_template_fixtures.py [--model PATH]

Needs the PyPI packages jinja2 (3.1) and gguf. The tests read only the JSON
this writes (tests/fixtures/templates/); they never need Python.

jinja2 is configured as HuggingFace transformers configures it in
`_compile_jinja_template` (utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]) ({% generation %} blocks render
in place); `tojson` replaced by json.dumps(x,
ensure_ascii=False, indent, separators, sort_keys); globals raise_exception
(raises TemplateError) and strftime_now. Variables as in
`apply_chat_template`: messages, tools (None when absent), documents (None),
add_generation_prompt, the special tokens that are set (bos_token,
eos_token), and date_string fixed to "26 Jul 2024" so output is deterministic.

Writes:
  tests/fixtures/templates/smollm2-135m.jinja
      `tokenizer.chat_template` of the SmolLM2-135M GGUF (MODEL defaults to
      $KVAD_MODEL_SMOLLM2, then $KVAD_HOME/models/smollm2-135m.gguf, then
      ~/.cache/kvad/models/smollm2-135m.gguf; when absent, the existing copy is used).
  tests/fixtures/templates/<name>.json, one per template
      {"template": path relative to the repository root, or
       "peer_template": path relative to peer-data (../shared/peer-data; the
       tests get its location from CMake's KVAD_PEER_DATA),
       "cases": [{"name", "messages", "tools", "add_generation_prompt",
                  "bos_token"?, "eos_token"?, "date_string",
                  "expected" | ("error" and "raised")}]}
      `raised` is true when the template called raise_exception (the error is
      then the template's own message); other errors (undefined values, type
      errors) have raised=false and their message is jinja2's, for reference.
  tests/fixtures/templates/constructs.json
      {"cases": [{"template", "context", "expected" | "error"}]}: single
      Jinja2 constructs (printing, operators, filters, tests, whitespace
      control, scoping) rendered the same way.
"""
import argparse
import datetime
import json
import os
from pathlib import Path

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "templates"
PEER_DATA = ROOT.parent / "shared" / "peer-data"
if not PEER_DATA.exists():
    PEER_DATA = Path("/work/shared/peer-data")
DATE_STRING = "26 Jul 2024"

# Template name -> special tokens as the model's tokenizer_config.json sets
# them (None: unset, so HF does not pass it).
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
}

# Templates kept in the repository (tests/fixtures/templates/NAME.jinja):
# openai/gpt-oss-120b's chat template (the Harmony format) as llama.cpp's
# scripts/get_chat_template.py fetched it into llama.cpp's
# models/templates/openai-gpt-oss-120b.jinja (in the llama-cpp-python 0.3.36
# sdist), with the special tokens of its tokenizer_config.json. It prints
# strftime_now("%Y-%m-%d"): rendered here at the fixed date FIXED_NOW, which
# the fixture records ("strftime_now") for the test to put in place of today.
LOCAL_TEMPLATES = {
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
}
FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


class RaisedException(jinja2.exceptions.TemplateError):
    """raise_exception() in a template (a TemplateError, as in transformers)."""


def raise_exception(message):
    raise RaisedException(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


class GenerationTag(Extension):
    """transformers' AssistantTracker without the tracking: {% generation %}
    ... {% endgeneration %} renders its body in place (as a call block)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# --- conversations ---------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_temperature",
            "description": "Get the current temperature at a location.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The location to get the temperature for, in the format \"City, Country\"",
                    },
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "The unit to return the temperature in.",
                    },
                },
                "required": ["location", "unit"],
            },
            "return": {
                "type": "number",
                "description": "The current temperature at the specified location in the specified units, as a float.",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_current_wind_speed",
            "description": "Get the current wind speed in km/h at a given location.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The location, e.g. \"Paris, France\""},
                },
                "required": ["location"],
            },
        },
    },
]

SYS = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
USER1 = {"role": "user", "content": "Hello! What is the capital of France?"}
ASSIST1 = {"role": "assistant", "content": "The capital of France is Paris."}
USER2 = {"role": "user", "content": "And how many people live there?"}
ARGS = {"location": "Paris, France", "unit": "celsius"}

# The shape of HF's tool-use documentation: arguments as a dict, a 9-character
# id (Mistral requires one), the tool reply with tool_call_id and name.
TOOL_CALL_HF = {
    "role": "assistant",
    "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "get_current_temperature", "arguments": ARGS}}
    ],
}
TOOL_REPLY = {"role": "tool", "tool_call_id": "call12345", "name": "get_current_temperature", "content": "22.0"}
# The OpenAI API's shape: content null, arguments a JSON string.
TOOL_CALL_OPENAI = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call12345",
            "type": "function",
            "function": {"name": "get_current_temperature", "arguments": json.dumps(ARGS)},
        }
    ],
}
TWO_TOOL_CALLS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "get_current_temperature", "arguments": json.dumps(ARGS)}},
        {"id": "call67890", "type": "function",
         "function": {"name": "get_current_wind_speed", "arguments": json.dumps({"location": "Paris, France"})}},
    ],
}
TWO_TOOL_REPLIES = [
    {"role": "tool", "tool_call_id": "call12345", "name": "get_current_temperature", "content": "22.0"},
    {"role": "tool", "tool_call_id": "call67890", "name": "get_current_wind_speed", "content": "{\"speed\": 12}"},
]

# gpt-oss's template reads an assistant turn's reasoning from "thinking".
HARMONY_CONVERSATIONS = [
    ("thinking_multi_turn", [USER1, {"role": "assistant", "content": "Paris.", "thinking": "The user asks about France."},
                             USER2], None),
    ("thinking_last", [USER1, {"role": "assistant", "content": "Paris.", "thinking": "The user asks about France."}],
     None),
    ("thinking_tool_call", [USER1, {**TOOL_CALL_HF, "thinking": "I need the temperature."}, TOOL_REPLY], TOOLS),
    ("developer_instructions", [{"role": "developer", "content": "Answer in French."}, USER1], None),
]

CONVERSATIONS = [
    ("system_user", [SYS, USER1], None),
    ("user", [USER1], None),
    ("multi_turn", [USER1, ASSIST1, USER2], None),
    ("system_multi_turn", [SYS, USER1, ASSIST1, USER2], None),
    ("ends_with_assistant", [SYS, USER1, ASSIST1], None),
    ("unicode_whitespace", [
        {"role": "system", "content": "  Réponds en français.\n"},
        {"role": "user", "content": "\t\"Quotes\", 'apostrophes', back\\slash, {{ not a tag }} {% raw %}, 中文, emoji 🎉  \n"},
        {"role": "assistant", "content": "  D'accord !\n\nLigne deux.  "},
        {"role": "user", "content": "Encore\r\nune fois"},
    ], None),
    ("tools_user", [SYS, USER1], TOOLS),
    ("tools_no_system", [USER1], TOOLS),
    ("tool_call_hf", [SYS, USER1, TOOL_CALL_HF, TOOL_REPLY, {"role": "assistant", "content": "It is 22 °C in Paris."}],
     TOOLS),
    ("tool_call_openai", [USER1, TOOL_CALL_OPENAI, TOOL_REPLY], TOOLS),
    ("two_tool_calls", [USER1, TWO_TOOL_CALLS] + TWO_TOOL_REPLIES, TOOLS),
    ("tool_call_no_tools", [USER1, TOOL_CALL_HF, TOOL_REPLY], None),
    ("think", [USER1, {"role": "assistant", "content": "<think>\nThe user asks about France.\n</think>\n\nParis."},
               USER2], None),
    ("not_alternating", [USER1, USER2], None),
    ("assistant_first", [ASSIST1, USER1], None),
    ("system_only", [SYS], None),
    ("empty", [], None),
    ("empty_content", [{"role": "user", "content": ""}], None),
]


def render(env, source, ctx):
    try:
        return {"expected": env.from_string(source).render(**ctx)}
    except RaisedException as e:
        return {"error": str(e), "raised": True}
    except Exception as e:  # jinja2 and Python errors: recorded, kvad must fail too
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def template_fixture(env, name, path, bos, eos, extra=()):
    source = path.read_text(encoding="utf-8")
    cases = []
    for conv_name, messages, tools in CONVERSATIONS + list(extra):
        for agp in (False, True):
            ctx = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": agp}
            if bos is not None:
                ctx["bos_token"] = bos
            if eos is not None:
                ctx["eos_token"] = eos
            ctx["date_string"] = DATE_STRING
            case = {"name": f"{conv_name}{'+gen' if agp else ''}", "messages": messages, "tools": tools,
                    "add_generation_prompt": agp}
            if bos is not None:
                case["bos_token"] = bos
            if eos is not None:
                case["eos_token"] = eos
            case["date_string"] = DATE_STRING
            case.update(render(env, source, ctx))
            cases.append(case)
    n_err = sum("error" in c for c in cases)
    print(f"{name}: {len(cases)} cases, {n_err} raise")
    if path.is_relative_to(PEER_DATA):
        where = {"peer_template": str(path.relative_to(PEER_DATA))}
    else:
        where = {"template": str(path.relative_to(ROOT))}
    return {**where, "cases": cases}


# --- single constructs --------------------------------------------------------------

CTX = {"x": [1], "y": None, "d": {"b": 1, "a": [1, 2]}, "s": "str", "n": 5, "f": 2.5, "messages": [],
       "people": [{"name": "Ann", "age": 31, "role": "user"}, {"name": "bob", "age": 25, "role": "assistant"},
                  {"name": "Cid", "age": 31, "role": "user"}]}

CONSTRUCTS = [
    # printing as Python prints
    "{{ [1, 'a', none, true, 1.5, {'a': (1,)}] }}",
    "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ none }} {{ True }} {{ false }}",
    "{{ 1e20 }} {{ 1.5e-5 }} {{ 10 / 4 }} {{ 3.0 }} {{ 1 / 3 }} {{ 100000000000000000.0 }} {{ 0.0001 }} {{ 0.00001 }}",
    "{{ 12345678901234567.0 }} {{ 1e16 }} {{ 9999999999999998.0 }} {{ 123456789.123 }} {{ -0.0 }} {{ 1e-7 }} {{ 5e-324 }}",
    "{{ 0.1 + 0.2 }} {{ 1e22 }} {{ 1.5e300 * 1e10 }} {{ [1.5, 2.0] }} {{ 1.7976931348623157e308 }}",
    "{{ \"it's\" ~ [\"it's\", 'say \"hi\"', 'a\\tb\\xa0\\u200b', 'both \\' and \"', '\\\\'] }}",
    "{{ 'a\\nb\\x41\\u00e9\\q\\101\\U0001F600' }}",
    "{{ d }} {{ x }} {{ s }} {{ n }} {{ f }}",
    "{{ 'a' 'b' }} {{ 1_000 }} {{ 0x10 }} {{ 1.5e3 }} {{ 0o17 }} {{ 0b101 }}",
    # arithmetic and operators
    "{{ 7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ (-2) ** 2 }}",
    "{{ 10 // 3 }} {{ -10 // 3 }} {{ 10.5 // 3 }} {{ 10 % 3.5 }} {{ 7 / 7 }} {{ 2 * 3.0 }} {{ 3 - True }} {{ -7.5 // 2 }}",
    "{{ 'ab' * 3 }}|{{ 'a' * -1 }}|{{ 2 * 'x' }}|{{ [1] * 2 }}|{{ [1] + [2] }}|{{ (1,) + (2,) }}",
    "{{ 'abc' ~ 1 ~ none ~ undef ~ [1] ~ 2.0 }}",
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ {'a': 1} == {'a': 1} }} {{ (1, 2) == [1, 2] }}",
    "{{ 'B' > 'a' }} {{ none == none }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 < 2 == 2 }}",
    "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'a' in undef }}",
    "{{ 1 and 'x' }} {{ 0 or [] }} {{ not 'a' }} {{ none or 'd' }} {{ '' and 1 }}",
    "{{ 1 if x else 2 }} {{ 1 if false else 2 if false else 3 }}|{{ 1 if false }}|",
    "{{ -1 ** 2 }} {{ not 1 == 2 }} {{ -x|length }}",
    "{{ 'a' + 1 }}",
    "{{ none + 1 }}",
    "{{ 10 / 0 }}",
    "{{ 1 < 'a' }}",
    "{{ - 'a' }}",
    # indexing, slicing, attributes
    "{{ [1, 2, 3][-1] }} {{ [1, 2, 3][1:] }} {{ [1, 2, 3][5] }}|{{ {'a': 1}['b'] }}|{{ x.0 }}",
    "{{ 'abc'[::-1] }} {{ 'héllo'[1:3] }} {{ 'héllo'|length }} {{ 'abcdef'[1:5:2] }} {{ [1, 2, 3, 4][::-2] }} {{ 'abc'[10:] }}",
    "{{ 'abc'[1] }} {{ 'abc'[-1] }} {{ x[0:1] }} {{ [1, 2, 3][-5:2] }} {{ 'hello'[-3:] }}",
    "{{ x.foo }}|{{ d.foo }}|{{ d.a.b }}|{{ s.content }}|{{ s.content is defined }}|{{ s.upper is defined }}",
    "{{ d['a'] }} {{ d.a }} {{ d.get('b') }} {{ d.get('z', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }}",
    "{{ undef.attr }}",
    "{{ messages[0]['role'] }}",
    "{{ x[5].foo }}",
    "{{ x.append(2) }}",
    "{{ x.append is defined }} {{ d.update is defined }}",
    # undefined
    "{{ u is defined }} {{ u is undefined }} {{ u|length }} {{ u|trim }}|{{ u|string }}|{{ u == u }} {{ u is none }}",
    "{{ u is iterable }} {{ u is sequence }} {{ u is mapping }} {{ u is string }} {{ [u] }}",
    "{% for a in u %}a{% else %}empty{% endfor %}",
    "{{ u|tojson }}",
    "{{ u + 'a' }}",
    "{{ u() }}",
    # whitespace control, comments, raw
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "a\n  {%+ if true %}\nb{% endif +%}\nc",
    "a\n  {# c #}\nb\n  {#- c -#}  \nd",
    "{% raw %}\n {{ x }} {% endraw %}\nz",
    "  {%- raw -%}  {{ x }}  {%- endraw -%}  z",
    "{{ 1 }}\n{{ 2 }}\n",
    "x {{- 1 -}} \n y",
    "  {% if true %}\n  x\n  {% endif %}\n  y {{ 1 }}\n",
    "{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\n",
    "{%- for i in [1, 2] -%}\n  [{{ i }}]\n{%- endfor %}\nend",
    "line\r\nwindows\rmac\n{% if true %}\r\nx\r\n{% endif %}\r\n",
    "\t {% if true %}\ttabbed\n\t {% endif %}\n",
    "{{+ 1 }}{{- ' ' -}}{{ 2 }}",
    "{# comment only #}",
    "text {#- strip before #} after",
    # statements
    "{% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t %}  in {{ a }}\n{% endset %}[{{ t }}]",
    "{% set t | upper %}abc{% endset %}{{ t }}",
    "{% set ns = namespace(a=1, b=[]) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns }}",
    "{% set ns = namespace() %}{% set ns.found = false %}{% for p in people %}{% if p.age > 30 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{% set x = 5 %}{% if true %}{% set x = 6 %}{% endif %}{{ x }}",
    "{% for m in x %}{{ m }}{% endfor %}{{ m }}",
    "{% for a in [3, 1, 2] if a > 1 %}{{ loop.index }}/{{ loop.length }}{{ loop.last }}{{ loop.previtem }}{% else %}E{% endfor %}",
    "{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.nextitem }}{{ loop.first }}{{ loop.index0 }}{% endfor %}",
    "{% for a in [1, 2] %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}",
    "{% for i in [1] %}{% for j in [2] %}{{ loop.index }}{{ loop.depth }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% for a, b in [[1, 2, 3]] %}{{ a + b }}{% endfor %}",
    "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %} {% for c in 'hé' %}[{{ c }}]{% endfor %}",
    "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
    "{% for p in people %}{{ loop.changed(p.age) }}{% endfor %}",
    "{% for i in [] %}x{% endfor %}|{% for i in none %}x{% endfor %}",
    "{% macro m(a, b='x') %}[{{ a }}{{ b }}{{ caller() if caller }}]{% endmacro %}{{ m(1) }}{% call m(2, b='y') %}body{% endcall %}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
    "{% macro m(x) %}{{ caller(x * 2) }}{% endmacro %}{% call(v) m(3) %}v={{ v }}{% endcall %}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m() }}|",
    "{% macro f() %}{{ v }}{% endmacro %}{% set v = 1 %}{{ f() }}",
    "{% set v = 5 %}{% macro m() %}{% set v = 6 %}{{ v }}{% endmacro %}{{ m() }}{{ v }}",
    "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "{% macro render(v) %}{% if v is mapping %}{{ '{' }}{% for k, x in v.items() %}{{ k }}:{{ render(x) }};{% endfor %}{{ '}' }}{% elif v is string %}'{{ v }}'{% else %}{{ v }}{% endif %}{% endmacro %}{{ render({'a': {'b': [1, 2], 'c': 'z'}}) }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}",
    "{% filter upper %}abc{{ 1 }}{% endfilter %}",
    "{% if true %}{% generation %}gen{{ 1 }}{% endgeneration %}{% endif %}",
    "{{ raise_exception('boom: ' ~ 1) }}",
    "{% if true %}{% break %}{% endif %}",
    "{{ 'abc' }",
    "{% if x %}a",
    "line1\n{{ x.y( }}",
    "{% include 'x' %}",
    "{% for %}",
    "{{ 'a'|nofilter }}",
    "{% if false %}{{ 'a'|nofilter }}{% endif %}ok",
    "{{ 1 is notest }}",
    # filters
    "{{ -2|abs }} {{ 2.5|abs }} {{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }}",
    "{{ 'hELLO wOrld'|capitalize }} {{ 'ab'|center(6) }}| {{ 'abc'|count }} {{ [1, 2]|length }} {{ d|length }}",
    "{{ undef|default('d') }}|{{ none|default('z') }}|{{ false|d('z', true) }}|{{ x|default }}|{{ ''|default('e', boolean=true) }}",
    "{{ {'b': 1, 'a': 2, 'C': 0}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}",
    "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape }}",
    "{{ ['a', 'b']|first }} {{ ['a', 'b']|last }} {{ 'ab'|first }} {{ []|first }}| {{ d|first }}",
    "{{ '3.7'|float }} {{ 'x'|float }} {{ 3|float }} {{ ' 1e3 '|float }} {{ 'nan'|float }} {{ 'inf'|float }}",
    "{{ '3.7'|int }} {{ 'x'|int }} {{ '0x1A'|int(0, 16) }} {{ true|int }} {{ 1.9|int }} {{ -3.7|int }} {{ ' 42 '|int }} {{ '1_000'|int }} {{ none|int(7) }}",
    "{{ '%s-%d'|format('a', 3) }} {{ '%05.1f|%-4s|%x|%r'|format(3.14159, 'ab', 255, 'q') }} {{ '%(a)s'|format(a=1) }}",
    "{{ 'a\\nb'|indent(2) }}|{{ 'a\\n\\nb'|indent(2, true) }}|{{ 'a\\n\\nb\\n'|indent(2, blank=true) }}|{{ 'x'|indent(width='>>', first=true) }}",
    "{{ {'b': 1, 'a': 2}|items|list }} {{ undef|items|list }}",
    "{{ [1, 2, 3]|join }} {{ [1, 2, 3]|join('-') }} {{ people|join(', ', attribute='name') }} {{ ['a', 1, none]|join('|') }}",
    "{{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }}",
    "{{ 'ABC ÉCOLE'|lower }} {{ 'straße'|upper }} {{ 'abc'|upper|lower }}",
    "{{ people|map(attribute='name')|list }} {{ ['a', 'b']|map('upper')|list }} {{ x|map('string')|list }} {{ people|map(attribute='zip', default='?')|list }}",
    "{{ people|map(attribute='age')|max }} {{ people|max(attribute='age') }} {{ ['b', 'A', 'c']|min }} {{ []|max }}|",
    "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }}",
    "{{ people|selectattr('role', 'equalto', 'user')|map(attribute='name')|list }} {{ people|rejectattr('age', 'gt', 30)|list }}",
    "{{ [{'a': 1}, {'a': 0}, {}]|selectattr('a')|list }} {{ people|selectattr('age', 'in', [25])|list|length }}",
    "{{ 'aaa'|replace('a', 'b', 2) }} {{ 'a b'|replace(' ', '_') }} {{ 'abc'|replace('', '-') }}",
    "{{ [1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ d|reverse|list }}",
    "{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.675|round(2) }} {{ 3.7|round(0, 'floor') }} {{ 3.2|round(0, 'ceil') }} {{ -2.5|round }} {{ 3|round }} {{ 1234.5|round(-2) }}",
    "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) }} {{ [3, 1]|sort(reverse=true) }} {{ people|sort(attribute='age')|map(attribute='name')|list }}",
    "{{ people|sort(attribute='age,name')|map(attribute='name')|list }} {{ people|sort(attribute='name', reverse=true)|map(attribute='name')|join }}",
    "{{ 'x'|string }} {{ [1]|string }} {{ none|string }} {{ 1.0|string }}",
    "{{ [1, 2, 3]|sum }} {{ people|sum(attribute='age') }} {{ [0.5, 1]|sum(start=10) }}",
    "{{ 'hello world-wide (x) [y] <z>'|title }} {{ \"they're bill's\"|title }}",
    "{{ '  x \\n'|trim }}|{{ 'xyzx'|trim('x') }}|{{ '\\u3000x\\xa0'|trim }}|",
    "{{ 'one two three four'|truncate(9) }}|{{ 'one two three four five six'|truncate(12, true) }}|{{ 'short'|truncate(10) }}",
    "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ people|unique(attribute='age')|map(attribute='name')|list }}",
    "{{ 'one two  three'|wordcount }} {{ 'x'|safe }} {{ 5|string|length }}",
    # tojson (HF's json.dumps)
    "{{ {'a': [1, 'é', {'b': none}], 'c': 1.0, 'd': true}|tojson }}",
    "{{ {'a': [1, 2]}|tojson(indent=2) }}",
    "{{ {'a': [1, 2], 'b': {}, 'c': []}|tojson(indent=4) }}",
    "{{ 'x\"\\n\\u0001\\u007f\\u2028/'|tojson }} {{ 'a'|tojson(separators=(',', ':')) }} {{ {'a': 1, 'b': [1, 2]}|tojson(separators=(',', ':')) }}",
    "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'é😀'|tojson(ensure_ascii=true) }}",
    "{{ x|tojson(indent='\\t') }}{{ {'a': 1}|tojson(indent=0) }}",
    "{{ [1, [2, 3]]|tojson }} {{ (1, 2)|tojson }} {{ 3.0|tojson }} {{ 1e100|tojson }} {{ none|tojson }} {{ 'ab'|tojson }}",
    "{{ {1: 'a', none: 2, true: 3, 1.5: 4}|tojson }}",
    "{{ people|tojson }}",
    # tests
    "{{ 5 is divisibleby 5 }} {{ 4 is even }} {{ 3 is odd }} {{ x is number }} {{ true is number }} {{ true is integer }} {{ 1.0 is float }} {{ none is none }}",
    "{{ {'a': 1} is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ {'a': 1} is sequence }} {{ 'x' is string }} {{ 1 is in [1] }}",
    "{{ 1 is string }} {{ 'A' is upper }} {{ 'a1' is lower }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 0 is false }}",
    "{{ 2 is eq 2 }} {{ 2 is equalto 3 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is gt 3 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 1 is lessthan 2 }} {{ 1 is greaterthan 2 }}",
    "{{ none is sameas none }} {{ 1 is sameas 1 }} {{ [] is sameas [] }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ range is callable }} {{ 1 is callable }}",
    "{{ d is not mapping }} {{ undef is not defined }} {{ not undef is defined }} {{ x is defined and x|length > 0 }}",
    # globals
    "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}",
    "{{ range(100001)|length }}",
    "{{ dict(a=1, b='x') }} {{ dict({'z': 1}, y=2) }} {{ namespace(a=1).a }} {{ namespace({'b': 2}).b }}",
    "{% set j = joiner(', ') %}{% for i in [1, 2, 3] %}{{ j() }}{{ i }}{% endfor %}",
    # Python string methods
    "{{ 'x'.strip() }}{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'abc'.lstrip('ab') }}",
    "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ '  a b  c  '.split(none, 1) }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ 'a b c'.rsplit(' ', 1) }} {{ '  a b  c  '.rsplit(none, 1) }} {{ 'a::b::c'.rsplit('::') }}",
    "{{ ' a\\n b \\r\\n\\nc'.splitlines() }} {{ 'a\\nb'.splitlines(true) }}",
    "{{ 'Hello'.find('l') }} {{ 'Hello'.rfind('l') }} {{ 'Hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'abcabc'.count('b') }} {{ 'Hello'.index('e') }}",
    "{{ 'x'.join(['a', 'b']) }} {{ ', '.join(people|map(attribute='name')) }}",
    "{{ 'abc'.startswith('a') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith('b', 1) }}",
    "{{ 'Hello WORLD'.title() }} {{ \"they're bill's friends\".title() }} {{ 'hello world'.capitalize() }} {{ 'AbC'.swapcase() }}",
    "{{ 'a-b'.replace('-', '+') }} {{ 'aaa'.replace('a', 'b', 1) }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }}",
    "{{ '{}-{}'.format('a', 1) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{a}'.format(a=1) }} {{ '{:>5}|{:<4}|{:^5}|{:05d}|{:.2f}'.format('x', 'y', 'z', 42, 3.14159) }} {{ '{!r}'.format('q') }}",
    "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.py'.removesuffix('.py') }} {{ '42'.zfill(5) }} {{ 'ab'.ljust(4, '*') }} {{ 'ab'.rjust(4) }}|{{ 'ab'.center(5, '-') }}",
    "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ ''.isdigit() }}",
    "{{ 'x'.upper is defined }} {{ 'x'.nope is defined }} {{ d.items is defined }}",
    "{{ [1, 2, 1].count(1) }} {{ [1, 2, 3].index(2) }} {{ (1, 2).count(2) }}",
    "{{ '%s and %s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%.3f' % 2 }} {{ '%5s|%-5s|' % ('a', 'b') }} {{ '%s' % none }} {{ '%s' % [1] }}",
    # corner cases found by random differential testing against jinja2
    "{{ 0.1 is odd }} {{ 2.5 is even }} {{ 3.0 is odd }} {{ 4.0 is even }} {{ false|select|list }} {{ 0|map('string')|list }}",
    "{{ x|center(11) }}|{{ u|center(3) }}|{{ 1|center(5) }}|{{ []|truncate(5) }} {{ u|last }}|{{ 'abc' % [1] }}|{{ '%s' % [1, 2] }}",
    "{{ f[::-1] }}",
    "{{ d[:1] }}",
    "{{ [1, 2] in d }}",
    "{{ u|float }}",
    "{{ {}[0]|int }}",
    "{{ n|indent(2) }}",
    # printing loop / namespace objects
    "{% for i in [1] %}{{ loop.length }}{% endfor %}{{ namespace(a=1) }}",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="SmolLM2-135M GGUF (to read tokenizer.chat_template and its bos/eos)")
    args = ap.parse_args()
    env = make_env()
    OUT.mkdir(parents=True, exist_ok=True)

    # SmolLM2's own template, from the GGUF.
    model = args.model or os.environ.get("KVAD_MODEL_SMOLLM2")
    if not model:
        home = Path(os.environ.get("KVAD_HOME", Path.home() / ".cache" / "kvad"))
        model = home / "models" / "smollm2-135m.gguf"
    smol = OUT / "smollm2-135m.jinja"
    smol_tokens = OUT / "smollm2-135m.tokens.json"
    if Path(model).exists():
        import gguf
        r = gguf.GGUFReader(str(model))

        def field(key):
            f = r.fields[key]
            return f.parts[f.data[0]]

        source = bytes(field("tokenizer.chat_template")).decode("utf-8")
        tokens = r.fields["tokenizer.ggml.tokens"]
        bos_id = int(field("tokenizer.ggml.bos_token_id")[0])
        eos_id = int(field("tokenizer.ggml.eos_token_id")[0])
        bos = bytes(tokens.parts[tokens.data[bos_id]]).decode("utf-8")
        eos = bytes(tokens.parts[tokens.data[eos_id]]).decode("utf-8")
        smol.write_bytes(source.encode("utf-8"))
        smol_tokens.write_text(json.dumps({"bos_token": bos, "eos_token": eos}, ensure_ascii=False) + "\n",
                               encoding="utf-8")
        print(f"read the chat template of {model} (bos {bos!r}, eos {eos!r})")
    elif not smol.exists():
        raise SystemExit(f"{model} not found and no {smol} to reuse: pass --model")
    toks = json.loads(smol_tokens.read_text(encoding="utf-8"))

    fixtures = {name: (PEER_DATA / "templates" / f"{name}.jinja", bos, eos) for name, (bos, eos) in TEMPLATES.items()}
    fixtures["smollm2-135m"] = (smol, toks["bos_token"], toks["eos_token"])
    total = 0
    for name, (path, bos, eos) in fixtures.items():
        fx = template_fixture(env, name, path, bos, eos)
        total += len(fx["cases"])
        (OUT / f"{name}.json").write_text(json.dumps(fx, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    fixed = make_env()
    fixed.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    for name, (bos, eos) in LOCAL_TEMPLATES.items():
        fx = template_fixture(fixed, name, OUT / f"{name}.jinja", bos, eos, HARMONY_CONVERSATIONS)
        fx = {"template": fx["template"], "strftime_now": FIXED_NOW.strftime("%Y-%m-%d"), "cases": fx["cases"]}
        total += len(fx["cases"])
        (OUT / f"{name}.json").write_text(json.dumps(fx, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    cases = []
    for t in CONSTRUCTS:
        c = {"template": t, "context": CTX}
        r = render(env, t, CTX)
        c.update(r)
        cases.append(c)
    (OUT / "constructs.json").write_text(
        json.dumps({"context": CTX, "cases": [{k: v for k, v in c.items() if k != "context"} for c in cases]},
                   ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{total} template cases, {len(cases)} construct cases")


if __name__ == "__main__":
    main()
