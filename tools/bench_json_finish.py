#!/usr/bin/env python3
"""How often constrained JSON finishes: 16 schemas x 3 seeds through a real
`kvad serve`, with the official `openai` client, at temperature 1 and
max_tokens 400; a reply counts when it ends with finish_reason "stop" AND
validates under its schema (the `jsonschema` package, Draft 2020-12,
formats asserted).

Usage:
    python3 tools/bench_json_finish.py --kvad build/kvad [--model PATH]
        [--whitespace compact|pretty] [--max-string N] [--seeds 3] [--temperature 1.0]

Needs the `openai` and `jsonschema` packages (the test venv
~/.cache/kvad/venv has both). The model defaults to the store's
smollm2-135m. --whitespace and --max-string send {"kvad": {"json_whitespace":
..., "json_max_string_length": N}}; without them nothing kvad-specific is
sent, so an older binary can be measured too.
Prints one line per schema and the total.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
import time

import jsonschema
import openai

SCHEMAS = {
    "person": {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string", "format": "email"}},
        "required": ["name", "age", "email"], "additionalProperties": False},
    "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}, "z": {"type": "number"}},
              "required": ["x", "y", "z"], "additionalProperties": False},
    "integers": {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 8},
    "sentiment": {"type": "object", "properties": {
        "label": {"enum": ["positive", "negative", "neutral"]}, "score": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["label", "score"], "additionalProperties": False},
    "tags": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 20},
                                                       "maxItems": 5}},
             "required": ["tags"], "additionalProperties": False},
    "event": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 60}, "date": {"type": "string", "format": "date"},
        "start": {"type": "string", "format": "time"}, "attendees": {"type": "integer", "minimum": 0}},
        "required": ["title", "date", "start", "attendees"], "additionalProperties": False},
    "tree": {"$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 16}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                  "maxItems": 3}},
        "required": ["name", "children"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    "settings": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "product": {"type": "object", "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "price": {"type": "number"},
        "stock": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["sku", "price", "stock"], "additionalProperties": False},
    "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 3},
               "minItems": 2, "maxItems": 3},
    "answer": {"type": "object", "properties": {"reasoning": {"type": "string"}, "answer": {"type": "integer"}},
               "required": ["reasoning", "answer"], "additionalProperties": False},
    "union": {"anyOf": [{"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"],
                         "additionalProperties": False},
                        {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"],
                         "additionalProperties": False}]},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "country": {"enum": ["US", "FR", "DE", "JP"]}},
        "required": ["street", "city", "zip", "country"], "additionalProperties": False},
    "any_object": {"type": "object"},
    "measurements": {"type": "object", "properties": {
        "values": {"type": "array", "items": {"type": "number"}}, "unit": {"type": "string", "enum": ["cm", "kg", "s"]}},
        "required": ["values", "unit"], "additionalProperties": False},
    "config": {"type": "object", "properties": {
        "server": {"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
                   "required": ["host", "port"], "additionalProperties": False},
        "debug": {"type": "boolean"}, "retries": {"type": "integer"}, "ratio": {"type": "number"}},
        "required": ["server", "debug", "retries", "ratio"], "additionalProperties": False},
}

PROMPTS = {
    "person": "Give a person as JSON.", "point": "A point in space as JSON.", "integers": "Some integers as JSON.",
    "sentiment": "Classify the sentiment of 'I love it' as JSON.", "tags": "Tags for a blog post, as JSON.",
    "event": "An event as JSON.", "tree": "A small family tree as JSON.", "settings": "App settings as JSON.",
    "product": "A product as JSON.", "matrix": "A small matrix as JSON.", "answer": "What is 6 times 7? Answer as JSON.",
    "union": "Compute 2+2 as JSON.", "address": "An address as JSON.", "any_object": "Anything as a JSON object.",
    "measurements": "Some measurements as JSON.", "config": "A server config as JSON.",
}


def start_server(binary, model):
    cmd = [binary, "serve", "--model", model, "--port", "0", "-t", "2", "--parallel", "4", "--ctx-size", "2048"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, "http://127.0.0.1:%s" % m.group(1)
    proc.kill()
    sys.exit("kvad serve did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvad", required=True)
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/kvad/models/smollm2-135m.gguf"))
    ap.add_argument("--whitespace", choices=["compact", "pretty"])
    ap.add_argument("--max-string", type=int)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=400)
    args = ap.parse_args()
    proc, url = start_server(args.kvad, args.model)
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    kv = {}
    if args.whitespace:
        kv["json_whitespace"] = args.whitespace
    if args.max_string is not None:
        kv["json_max_string_length"] = args.max_string
    extra = {"kvad": kv} if kv else None
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER

    def one(job):
        name, seed = job
        schema = SCHEMAS[name]
        try:
            r = client.chat.completions.create(
                model="smollm2-135m", messages=[{"role": "user", "content": PROMPTS[name]}],
                temperature=args.temperature, seed=seed, max_tokens=args.max_tokens, extra_body=extra,
                response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}})
        except openai.APIStatusError as e:
            return name, seed, "http %d" % e.status_code, 0, ""
        ch = r.choices[0]
        text = ch.message.content or ""
        try:
            jsonschema.Draft202012Validator(schema, format_checker=checker).validate(json.loads(text))
            valid = True
        except (ValueError, jsonschema.ValidationError):
            valid = False
        ok = ch.finish_reason == "stop" and valid
        return name, seed, ch.finish_reason + ("" if valid else " invalid"), r.usage.completion_tokens, \
            "ok" if ok else text[-60:]

    jobs = [(n, s) for n in SCHEMAS for s in range(1, args.seeds + 1)]
    t0 = time.time()
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            results = list(ex.map(one, jobs))
    finally:
        proc.terminate()
        proc.wait(30)
    good = 0
    by_name = {}
    for name, seed, fin, ntok, tail in results:
        by_name.setdefault(name, []).append((seed, fin, ntok, tail))
        good += tail == "ok"
    for name, rs in by_name.items():
        n_ok = sum(1 for r in rs if r[3] == "ok")
        detail = "; ".join("seed %d: %s, %d tokens%s" % (s, f, t, "" if tl == "ok" else ", ends " + json.dumps(tl))
                           for s, f, t, tl in rs)
        print("%-13s %d/%d  %s" % (name, n_ok, len(rs), detail))
    print("stop and valid: %d of %d (%.0f%%), %.0f s, %s, kvad options %s" % (
        good, len(results), 100.0 * good / len(results), time.time() - t0, args.kvad, json.dumps(kv) if kv else "(not sent)"))


if __name__ == "__main__":
    main()
