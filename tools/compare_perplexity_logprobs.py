#!/usr/bin/env python3
"""Per-token comparison of `kvad perplexity` with llama.cpp on one GGUF:
where does a difference in PPL come from?

llama.cpp's side is llama-perplexity's method run through llama-cpp-python
(the text tokenized with BOS as the file says, chunks of -c tokens, each
chunk's first token replaced by BOS when the model adds one, evaluated from
an empty cache, the second half scored). kvad's side is the log-probability
file `kvad perplexity --kl-divergence-base FILE` writes (src/cli/perplexity.cpp
documents its layout). Prints, per chunk, both PPLs and the mean difference
of the scored tokens' negative log-likelihoods, the mean KL divergence and
top-1 agreement of the two distributions, and where in the chunk the
difference sits.

  kvad perplexity -m M.gguf -f text.txt -c 128 --chunks 8 --kl-divergence-base /tmp/k.kld
  LLAMA_CPP_LIB_PATH=... PYTHONPATH=... python3 tools/compare_perplexity_logprobs.py M.gguf text.txt /tmp/k.kld
"""
import sys

import numpy as np


def read_kvad(path):
    with open(path, "rb") as f:
        magic = f.read(8)
        assert magic == b"KVADKLD1", magic
        n_ctx, n_vocab, n_chunk, n_scored = np.frombuffer(f.read(16), dtype="<i4")
        tokens = np.frombuffer(f.read(4 * n_chunk * n_ctx), dtype="<i4").reshape(n_chunk, n_ctx)
    lp = np.memmap(path, dtype="<f4", mode="r", offset=8 + 16 + 4 * n_chunk * n_ctx,
                   shape=(n_chunk, n_scored, n_vocab))
    return int(n_ctx), int(n_vocab), int(n_chunk), int(n_scored), tokens, lp


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    model, text_path, kld = sys.argv[1:4]
    from llama_cpp import Llama
    n_ctx, n_vocab, n_chunk, n_scored, ktokens, klp = read_kvad(kld)
    llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, n_threads=2, verbose=False)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
    tokens = llm.tokenize(open(text_path, "rb").read(), add_bos=add_bos, special=False)
    first = n_ctx // 2
    all_l, all_k = [], []
    pos_diff = np.zeros(n_scored)
    for c in range(n_chunk):
        toks = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        assert toks == list(ktokens[c]), f"chunk {c}: the tokens differ from kvad's"
        batch = list(toks)
        if add_bos:
            batch[0] = llm.token_bos()
        llm.reset()
        llm.eval(batch)
        lp = log_softmax(np.asarray(llm.scores[first:n_ctx - 1], dtype=np.float32))
        tgt = np.asarray(toks[first + 1:n_ctx])
        nll_l = -lp[np.arange(n_scored), tgt]
        kp = np.asarray(klp[c], dtype=np.float64)
        nll_k = -kp[np.arange(n_scored), tgt]
        kl = (np.exp(lp) * (lp - kp)).sum(axis=-1)  # KL(llama.cpp || kvad)
        top = (lp.argmax(-1) == kp.argmax(-1)).mean()
        all_l.append(nll_l)
        all_k.append(nll_k)
        pos_diff += nll_k - nll_l
        print(f"chunk {c}: ppl llama.cpp {np.exp(nll_l.mean()):8.4f} kvad {np.exp(nll_k.mean()):8.4f}  "
              f"mean nll diff (kvad - llama.cpp) {np.mean(nll_k - nll_l):+.5f}  max |diff| {np.abs(nll_k - nll_l).max():.4f}  "
              f"KL {kl.mean():.6f}  same top-1 {100 * top:.1f}%")
    l, k = np.concatenate(all_l), np.concatenate(all_k)
    d = k - l
    print(f"all: PPL llama.cpp {np.exp(l.mean()):.4f}, kvad {np.exp(k.mean()):.4f} ({100 * (np.exp(k.mean()) / np.exp(l.mean()) - 1):+.3f}%); "
          f"mean nll diff {d.mean():+.5f} +/- {d.std() / np.sqrt(d.size):.5f} (std err), "
          f"|diff| mean {np.abs(d).mean():.4f}, max {np.abs(d).max():.4f}")
    q = n_scored // 4
    print("mean nll diff by quarter of the scored half:",
          " ".join(f"{(pos_diff[i * q:(i + 1) * q] / n_chunk).mean():+.5f}" for i in range(4)))
    big = np.argsort(-np.abs(d))[:5]
    print("largest per-token |diff| (chunk, position, llama.cpp nll, kvad nll):",
          [(int(i) // n_scored, first + int(i) % n_scored, round(float(l[i]), 4), round(float(k[i]), 4)) for i in big])
    without = np.delete(d, big)
    print(f"without those 5 tokens: PPL ratio {100 * (np.exp(without.mean()) - 1):+.3f}%")


if __name__ == "__main__":
    main()
