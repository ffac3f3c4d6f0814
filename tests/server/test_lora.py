"""LoRA adapters served under their own model names (kvad serve --lora
NAME=PATH, vLLM's --lora-modules), through the official `openai` client.

The adapters are written here: random PEFT folders (adapter_config.json +
adapter_model.safetensors, peft's key spelling) for smollm2-135m's q_proj
and v_proj (hidden 576, 3 KV heads of 64), made with the standard library
only. Checked: /v1/models lists them with the base as parent; requests for
the base, adapter A and adapter B running at once in one batch give, each,
exactly the tokens they give alone (temperature 0); the adapters change the
output; a cached prefix never crosses adapters (cached_tokens 0 for the
first request of another adapter with the same prompt); an unknown name is
404 model_not_found."""
import json
import random
import struct
import threading

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME  # noqa: E402

N_LAYER, N_EMBD, KV_DIM = 30, 576, 192
PROMPT = "The capital of France is"


def write_safetensors(path, tensors):
    """tensors: name -> (shape, list of floats), written as F32 safetensors."""
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_adapter(d, seed, r=2, std=0.15):
    rng = random.Random(seed)
    d.mkdir()
    t = {}
    for il in range(N_LAYER):
        for proj, n_out in (("q_proj", N_EMBD), ("v_proj", KV_DIM)):
            k = f"base_model.model.model.layers.{il}.self_attn.{proj}."
            t[k + "lora_A.weight"] = ((r, N_EMBD), [rng.gauss(0, std) for _ in range(r * N_EMBD)])
            t[k + "lora_B.weight"] = ((n_out, r), [rng.gauss(0, std) for _ in range(n_out * r)])
    write_safetensors(d / "adapter_model.safetensors", t)
    (d / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": r, "lora_alpha": 2 * r, "target_modules": ["q_proj", "v_proj"],
         "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}))
    return d


@pytest.fixture
def lora_server(start_server, tmp_path):
    a = make_adapter(tmp_path / "lora-a", 1)
    b = make_adapter(tmp_path / "lora-b", 2)
    return start_server("--parallel", "4", "--lora", f"alpha={a}", "--lora-modules", f"beta={b}")


def complete(c, model, prompt=PROMPT, n=12):
    r = c.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    return r.choices[0].text, r.usage


def test_adapters_are_listed_with_their_parent(lora_server):
    c = openai.OpenAI(base_url=lora_server.url + "/v1", api_key="none", max_retries=0)
    models = {m.id: m for m in c.models.list().data}
    assert set(models) == {MODEL_NAME, "alpha", "beta"}
    assert models["alpha"].model_extra.get("parent") == MODEL_NAME
    assert models["beta"].model_extra.get("parent") == MODEL_NAME
    assert models[MODEL_NAME].model_extra.get("parent") is None
    assert c.models.retrieve("beta").model_extra.get("parent") == MODEL_NAME


def test_mixed_batch_gives_each_request_its_own_tokens(lora_server):
    c = openai.OpenAI(base_url=lora_server.url + "/v1", api_key="none", max_retries=0)
    alone = {m: complete(c, m)[0] for m in (MODEL_NAME, "alpha", "beta")}
    assert len(set(alone.values())) == 3, alone  # each adapter changes the output
    # Three at once, twice over: they share decode steps (one batch).
    together, errors = {}, []

    def run(m, i):
        try:
            together[(m, i)] = complete(c, m)[0]
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(m, i)) for i in range(2) for m in (MODEL_NAME, "alpha", "beta")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (m, _), text in together.items():
        assert text == alone[m], (m, text, alone[m])


def test_prefix_reuse_never_crosses_adapters(lora_server):
    c = openai.OpenAI(base_url=lora_server.url + "/v1", api_key="none", max_retries=0)
    prompt = "A long shared prompt about rivers, mountains and the sea, " * 4
    _, u = complete(c, MODEL_NAME, prompt, 2)
    _, u = complete(c, MODEL_NAME, prompt, 2)
    assert u.prompt_tokens_details.cached_tokens > 0  # the base reuses its own prefix
    _, u = complete(c, "alpha", prompt, 2)
    assert u.prompt_tokens_details.cached_tokens == 0  # not the base's
    _, u = complete(c, "alpha", prompt, 2)
    assert u.prompt_tokens_details.cached_tokens > 0
    _, u = complete(c, "beta", prompt, 2)
    assert u.prompt_tokens_details.cached_tokens == 0  # not alpha's


def test_unknown_model_is_404(lora_server):
    c = openai.OpenAI(base_url=lora_server.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        complete(c, "gamma")
    assert e.value.body["code"] == "model_not_found"
    assert "'alpha'" in e.value.body["message"]


def test_bad_adapter_fails_at_start(start_server, tmp_path):
    d = make_adapter(tmp_path / "bad", 3)
    (d / "adapter_config.json").unlink()
    with pytest.raises(Exception) as e:
        start_server("--lora", f"bad={d}")
    assert "missing adapter_config.json" in str(e.value)
