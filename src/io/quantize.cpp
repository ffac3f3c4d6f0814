// Model quantization. The rules are stated in quantize.h; their source is
// llama.cpp's src/llama-quant.cpp (llama_tensor_get_type,
// tensor_allows_quantization, tensor_type_fallback).
#include "io/quantize.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "base/thread_pool.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kernels.h"
#include "tensor/half.h"

namespace kvad::quant {

namespace {

// llama_ftype values (llama.h).
const std::vector<QuantType> kTypes = {
    {"q8_0", 7, DType::Q8_0, false},    {"q4_0", 2, DType::Q4_0, false},    {"q4_1", 3, DType::Q4_1, false},
    {"q5_0", 8, DType::Q5_0, false},    {"q5_1", 9, DType::Q5_1, false},    {"q2_k", 10, DType::Q2_K, false},
    {"q3_k_m", 12, DType::Q3_K, true},  {"q4_k_s", 14, DType::Q4_K, true},  {"q4_k_m", 15, DType::Q4_K, true},
    {"q5_k_m", 17, DType::Q5_K, true},  {"q6_k", 18, DType::Q6_K, false},   {"iq4_nl", 25, DType::IQ4_NL, false},
    {"tq2_0", 37, DType::TQ2_0, false},
};

// llama_ftype values of the plain float forms (LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_BF16).
const std::vector<QuantType> kFloatTypes = {
    {"f32", 0, DType::F32, false}, {"f16", 1, DType::F16, false}, {"bf16", 32, DType::BF16, false}};

// Name parts of tensors llama.cpp never quantizes although they are 2-D
// "weight"s (tensor_allows_quantization): norms, MoE routers and routing
// tables, Gemma 3n's small altup/laurel and per-layer projections, Mamba
// and LFM2 convolutions, MiniMax indexers, RWKV's small mixes, T5's relative
// position bias, multimodal position/patch tensors, audio codebooks.
constexpr const char* kNotQuantized[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
    "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
    "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
    "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
    "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};
// Whole names never quantized (position embeddings, BERT token types).
constexpr const char* kNotQuantizedNames[] = {"position_embd.weight", "token_types.weight"};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

enum class Category { kTokenEmbd, kOutput, kAttnV, kAttnOutput, kFfnDown, kOther };

Category category(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight"))
    return Category::kAttnV;
  if (contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// The N of "blk.N." at the start of a name; -1 when there is none.
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t v = 0;
  size_t k = 4;
  if (k >= name.size() || !std::isdigit(static_cast<unsigned char>(name[k]))) return -1;
  for (; k < name.size() && std::isdigit(static_cast<unsigned char>(name[k])); ++k) {
    v = v * 10 + (name[k] - '0');
    if (v > (int64_t{1} << 40)) return -1;
  }
  return k < name.size() && name[k] == '.' ? v : -1;
}

// llama.cpp's order of tensors (weight_name_comparer): by layer (none
// first), then by name. The rank of a tensor among those of one category in
// this order is llama.cpp's running counter (i_attention_wv, i_ffn_down).
std::vector<int64_t> ranks_in_category(const std::vector<TensorDesc>& ts, Category cat, int64_t* count) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < ts.size(); ++i)
    if (category(ts[i].name) == cat) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const int64_t la = layer_of(ts[a].name), lb = layer_of(ts[b].name);
    if (la != lb) return la < lb;
    return ts[a].name < ts[b].name;
  });
  std::vector<int64_t> rank(ts.size(), -1);
  for (size_t r = 0; r < idx.size(); ++r) rank[idx[r]] = static_cast<int64_t>(r);
  *count = static_cast<int64_t>(idx.size());
  return rank;
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The mixtures' per-tensor choice before the fallback (quantize.h).
DType mixture_type(const QuantType& qt, const TensorDesc& t, bool tied, int64_t i_attn_v, int64_t n_attn_v,
                   int64_t i_ffn_down, int64_t n_ffn_down) {
  const std::string_view name = qt.name;
  const Category cat = category(t.name);
  if (cat == Category::kOutput || (tied && cat == Category::kTokenEmbd))
    return t.ne[0] % dtype_info(qt.base).block_elems != 0 ? DType::Q8_0 : DType::Q6_K;
  if (cat == Category::kAttnV) {
    if (name == "q3_k_m") return i_attn_v < 2 ? DType::Q5_K : DType::Q4_K;
    if (name == "q4_k_s") return i_attn_v < 4 ? DType::Q5_K : qt.base;
    return use_more_bits(i_attn_v, n_attn_v) ? DType::Q6_K : qt.base;  // q4_k_m, q5_k_m
  }
  if (cat == Category::kFfnDown) {
    if (name == "q3_k_m") return i_ffn_down < n_ffn_down / 16 ? DType::Q5_K : DType::Q4_K;
    if (name == "q4_k_s") return i_ffn_down < n_ffn_down / 8 ? DType::Q5_K : qt.base;
    return use_more_bits(i_ffn_down, n_ffn_down) ? DType::Q6_K : qt.base;  // q4_k_m, q5_k_m
  }
  if (cat == Category::kAttnOutput && name == "q3_k_m") return DType::Q4_K;
  return qt.base;
}

// llama.cpp's tensor_type_fallback: a type whose block does not divide the
// row length becomes a block-32 type of about as many bits; F16 when even
// 32 does not divide it.
DType fallback_type(DType t, int64_t ne0) {
  DType f = t;
  switch (t) {
    case DType::Q2_K: case DType::Q3_K: case DType::TQ1_0: case DType::TQ2_0: f = DType::Q4_0; break;
    case DType::Q4_K: f = DType::Q5_0; break;
    case DType::Q5_K: f = DType::Q5_1; break;
    case DType::Q6_K: f = DType::Q8_0; break;
    default: throw Error(std::string("quantize: no fallback type for ") + dtype_name(t));
  }
  return ne0 % dtype_info(f).block_elems == 0 ? f : DType::F16;
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s;
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? "x" : "") + std::to_string(ne[k]);
  return s;
}

// IQ4_NL as llama.cpp quantizes a model (ggml quantize_iq4_nl:
// quantize_row_iq4_nl_impl with ntry = 7 and no importance matrix), which is
// not ggml's quantize_row_iq4_nl_ref (ntry = -1, kvad's
// cpu_kernels(IQ4_NL).from_float): per block of 32, weights w = x^2; the
// scale is the best weighted least-squares fit sum(w*q*x) / sum(w*q*q) over
// the start d = max/127 and the 15 trial scales (itry + kvalues[0]) / max,
// itry in [-7, 7] (max: the x of largest |x|); then every x is given the
// level nearest x / d. Same float operations in the same order as ggml.
int best_index_iq4nl(float v) {
  const float v2 = v + v;
  int idx = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = idx + step;
    if (v2 >= static_cast<float>(cpu::kvalues_iq4nl[j - 1] + cpu::kvalues_iq4nl[j])) idx = j;
  }
  return idx;
}

void from_float_iq4_nl_search(const float* src, void* dst, int64_t n) {
  using cpu::kvalues_iq4nl;
  constexpr int kBlock = cpu::QK4_NL, kTry = 7;
  cpu::block_iq4_nl* y = static_cast<cpu::block_iq4_nl*>(dst);
  for (int64_t ib = 0; ib < n / kBlock; ++ib) {
    const float* x = src + ib * kBlock;
    float w[kBlock];
    uint8_t L[kBlock];
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j) {
      w[j] = x[j] * x[j];
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    float d = 0;
    if (amax >= 1e-15f) {
      d = -max / static_cast<float>(kvalues_iq4nl[0]);
      float id = 1 / d;
      float sumqx = 0, sumq2 = 0;
      for (int j = 0; j < kBlock; ++j) {
        const float q = kvalues_iq4nl[best_index_iq4nl(id * x[j])];
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
      }
      d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
      float best = d * sumqx;
      for (int itry = -kTry; itry <= kTry; ++itry) {
        id = static_cast<float>(itry + kvalues_iq4nl[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < kBlock; ++j) {
          const float q = kvalues_iq4nl[best_index_iq4nl(id * x[j])];
          sumqx += w[j] * q * x[j];
          sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
    }
    // ggml sets every index from the final scale, also when it is 0 (then
    // all are the level nearest 0).
    const float idd = d ? 1 / d : 0;
    for (int j = 0; j < kBlock; ++j) L[j] = static_cast<uint8_t>(best_index_iq4nl(idd * x[j]));
    y[ib].d = f32_to_f16(d);
    for (int j = 0; j < kBlock / 2; ++j) y[ib].qs[j] = static_cast<uint8_t>(L[j] | (L[j + kBlock / 2] << 4));
  }
}

// The row quantizer llama.cpp's quantizer uses for a type (ggml_quantize_chunk
// without an importance matrix): the _ref quantizers, kvad's from_float,
// except for IQ4_NL.
cpu::FromFloatFn model_quantizer(DType t) {
  if (t == DType::IQ4_NL) return from_float_iq4_nl_search;
  return cpu::cpu_kernels(t).from_float;
}

// Rows [r0, r0 + n) of `src` (rows of ne0 elements in src_type) to `dst`
// (rows in dst_type), split over the pool. Non-finite input is reported
// through *bad_row (the smallest such row, else -1).
void convert_rows(const uint8_t* src, DType src_type, int64_t n, int64_t ne0, DType dst_type, uint8_t* dst,
                  ThreadPool* pool, std::vector<std::vector<float>>& bufs, int64_t* bad_row) {
  const size_t in_row = row_bytes(src_type, ne0), out_row = row_bytes(dst_type, ne0);
  const cpu::ToFloatFn to_float = src_type == DType::F32 ? nullptr : cpu::cpu_kernels(src_type).to_float;
  const cpu::FromFloatFn from_float = model_quantizer(dst_type);
  if (!from_float) throw Error(std::string("quantize: no CPU quantizer for ") + dtype_name(dst_type));
  if (src_type != DType::F32 && !to_float) throw Error(std::string("quantize: cannot read ") + dtype_name(src_type));
  std::atomic<int64_t> bad{-1};
  auto work = [&](int64_t b, int64_t e, int ith) {
    std::vector<float>& buf = bufs[static_cast<size_t>(ith)];
    if (static_cast<int64_t>(buf.size()) < ne0) buf.resize(static_cast<size_t>(ne0));
    for (int64_t r = b; r < e; ++r) {
      const uint8_t* s = src + static_cast<size_t>(r) * in_row;
      const float* x = buf.data();
      if (to_float)
        to_float(s, buf.data(), ne0);
      else if (reinterpret_cast<uintptr_t>(s) % alignof(float) == 0)
        x = reinterpret_cast<const float*>(s);
      else
        std::memcpy(buf.data(), s, in_row);
      // Inf/NaN would make meaningless scales (llama.cpp rejects the result).
      uint32_t all = 0;
      for (int64_t k = 0; k < ne0; ++k) {
        uint32_t u;
        std::memcpy(&u, x + k, 4);
        all |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
      }
      if (all) {
        int64_t cur = bad.load();
        while ((cur < 0 || r < cur) && !bad.compare_exchange_weak(cur, r)) {
        }
        continue;
      }
      from_float(x, dst + static_cast<size_t>(r) * out_row, ne0);
    }
  };
  if (pool && pool->size() > 1 && n > 1) {
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, ne0));
    pool->parallel_for(n, grain, work);
  } else {
    work(0, n, 0);
  }
  *bad_row = bad.load();
}

}  // namespace

const std::vector<QuantType>& quant_types() { return kTypes; }

std::string quant_type_names() {
  std::string s;
  for (const QuantType& t : kTypes) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

namespace {

const QuantType* find_in(const std::vector<QuantType>& types, std::string_view name) {
  for (const QuantType& t : types) {
    const std::string_view n = t.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t k = 0; k < n.size() && eq; ++k)
      eq = std::tolower(static_cast<unsigned char>(name[k])) == n[k];
    if (eq) return &t;
  }
  return nullptr;
}

}  // namespace

const QuantType& find_quant_type(std::string_view name) {
  if (const QuantType* t = find_in(kTypes, name)) return *t;
  throw Error("unknown --type '" + std::string(name) + "'; valid types: " + quant_type_names());
}

const std::vector<QuantType>& float_types() { return kFloatTypes; }

const QuantType& find_form_type(std::string_view name) {
  if (const QuantType* t = find_in(kTypes, name)) return *t;
  if (const QuantType* t = find_in(kFloatTypes, name)) return *t;
  throw Error("unknown type '" + std::string(name) + "'; valid types: " + quant_type_names() + ", f32, f16, bf16");
}

bool is_quantized_tensor(const std::string& name, const std::vector<int64_t>& ne) {
  int n_dims = 1;  // ggml_n_dims: trailing dimensions of 1 do not count
  for (size_t k = ne.size(); k > 1; --k)
    if (ne[k - 1] > 1) {
      n_dims = static_cast<int>(k);
      break;
    }
  if (n_dims < 2) return false;
  if (name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) return false;
  for (const char* part : kNotQuantized)
    if (contains(name, part)) return false;
  for (const char* whole : kNotQuantizedNames)
    if (name == whole) return false;
  return true;
}

std::vector<TensorChoice> plan(const std::vector<TensorDesc>& tensors, const QuantType& qt, int64_t n_layer,
                               bool allow_requantize) {
  int64_t n_attn_v = 0, n_ffn_down = 0;
  const std::vector<int64_t> attn_v_rank = ranks_in_category(tensors, Category::kAttnV, &n_attn_v);
  const std::vector<int64_t> ffn_down_rank = ranks_in_category(tensors, Category::kFfnDown, &n_ffn_down);
  if (n_layer > 0) n_ffn_down = n_layer;
  bool tied = true;  // token_embd is also the output matrix unless output.weight exists
  for (const TensorDesc& t : tensors)
    if (t.name == "output.weight") tied = false;

  std::vector<TensorChoice> out(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorDesc& t = tensors[i];
    TensorChoice& c = out[i];
    c.type = c.wanted = t.type;
    if (t.ne.empty() || !is_quantized_tensor(t.name, t.ne)) continue;
    if (t.type == DType::MXFP4) continue;  // gpt-oss's experts as OpenAI ships them: 4-bit already, kept as they are
    if (!is_float(t.type) && !allow_requantize)
      throw Error("tensor '" + t.name + "' is " + dtype_name(t.type) +
                  "; kvad quantize reads F32, F16 or BF16 weights (requantizing a quantized model loses "
                  "quality: start from the F16/BF16 GGUF)");
    c.quantize = true;
    const int64_t ne0 = t.ne[0];
    if (!qt.mixture) {
      const int64_t block = dtype_info(qt.base).block_elems;
      if (ne0 % block != 0 && ne0 % 32 != 0) {
        // No quantized type fits rows like these (a tiny or unusual shape,
        // e.g. DeepSeek's q_lora_rank 24): F16, as llama-quantize does.
        c.type = DType::F16;
        c.wanted = qt.base;
        c.fallback = true;
        continue;
      }
      if (ne0 % block != 0) {  // a block-256 type on rows that only block-32 types fit
        std::string fit;
        for (const QuantType& o : kTypes)
          if (!o.mixture && dtype_info(o.base).block_elems == 32) fit += (fit.empty() ? "" : ", ") + std::string(o.name);
        fit = "types that fit: " + fit + " (block 32), or a mixture (q3_k_m, q4_k_s, q4_k_m, q5_k_m), which "
              "falls back per tensor";
        throw Error("--type " + std::string(qt.name) + ": tensor '" + t.name + "' (" + shape_str(t.ne) +
                    ") has rows of " + std::to_string(ne0) + ", not a multiple of " + dtype_name(qt.base) +
                    "'s block of " + std::to_string(block) + "; " + fit);
      }
      c.type = c.wanted = qt.base;
      continue;
    }
    const int64_t i_ffn = layer_of(t.name) >= 0 ? layer_of(t.name) : ffn_down_rank[i];
    c.wanted = mixture_type(qt, t, tied, attn_v_rank[i], n_attn_v, i_ffn, n_ffn_down);
    c.type = c.wanted;
    if (ne0 % dtype_info(c.wanted).block_elems != 0) {
      c.type = fallback_type(c.wanted, ne0);
      c.fallback = true;
    }
  }
  if (allow_requantize)
    for (size_t i = 0; i < tensors.size(); ++i)
      if (out[i].quantize && !is_float(tensors[i].type) && out[i].type == tensors[i].type) out[i].quantize = false;
  return out;
}

void quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType type, void* dst, ThreadPool* pool) {
  if (n_per_row % dtype_info(type).block_elems != 0)
    throw Error(std::string("quantize_rows: row length ") + std::to_string(n_per_row) + " is not a multiple of " +
                dtype_name(type) + "'s block");
  std::vector<std::vector<float>> bufs(static_cast<size_t>(pool ? pool->size() : 1));
  int64_t bad = -1;
  convert_rows(reinterpret_cast<const uint8_t*>(src), DType::F32, n_rows, n_per_row, type,
               static_cast<uint8_t*>(dst), pool, bufs, &bad);
  if (bad >= 0) throw Error("quantize_rows: row " + std::to_string(bad) + " has a non-finite value");
}

Result quantize_tensors(uint32_t version, const std::vector<gguf::Value>& metadata,
                        const std::vector<InputTensor>& tensors, const std::vector<TensorChoice>& choices,
                        uint32_t file_type, const std::string& out_path, const Options& options,
                        const std::string& origin, const gguf::File* in) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  if (choices.size() != tensors.size())
    throw Error("quantize: plan has " + std::to_string(choices.size()) + " entries for " +
                std::to_string(tensors.size()) + " tensors");

  gguf::Writer w(version);
  bool have_ft = false, have_qv = false;
  for (const gguf::Value& v : metadata) {
    if (v.key() == "general.file_type") {
      w.add(gguf::make_uint("general.file_type", gguf::ValueType::UINT32, file_type));
      have_ft = true;
    } else if (v.key() == "general.quantization_version") {
      w.add(gguf::make_uint("general.quantization_version", gguf::ValueType::UINT32, 2));
      have_qv = true;
    } else {
      w.add(v);
    }
  }
  if (!have_ft) w.add(gguf::make_uint("general.file_type", gguf::ValueType::UINT32, file_type));
  if (!have_qv) w.add(gguf::make_uint("general.quantization_version", gguf::ValueType::UINT32, 2));

  Result res;
  res.n_tensors = tensors.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const InputTensor& t = tensors[i];
    const TensorChoice& c = choices[i];
    if (c.quantize) {
      if (t.type != DType::F32 && !cpu::has_cpu_kernels(t.type))
        throw Error("tensor '" + t.name + "' is " + dtype_name(t.type) + ", which kvad cannot read to quantize");
      if (t.ne.empty() || t.ne[0] % dtype_info(c.type).block_elems != 0)
        throw Error("tensor '" + t.name + "': rows of " + std::to_string(t.ne.empty() ? 0 : t.ne[0]) +
                    " are not a multiple of " + dtype_name(c.type) + "'s block");
      ++res.n_quantized;
      res.n_fallback += c.fallback ? 1 : 0;
    }
    w.add_tensor_deferred(t.name, c.quantize ? c.type : t.type, t.ne);
  }

  const int n_threads = options.threads > 0 ? options.threads : 0;
  ThreadPool pool(n_threads);
  std::vector<std::vector<float>> bufs(static_cast<size_t>(pool.size()));
  std::vector<uint8_t> chunk, gathered;
  constexpr size_t kChunkBytes = size_t{16} << 20;  // output bytes per pass over the pool

  auto source = [&](size_t i, size_t n_bytes, const gguf::Writer::Sink& write) {
    const auto t0 = Clock::now();
    const InputTensor& t = tensors[i];
    const TensorChoice& c = choices[i];
    const int64_t ne0 = t.ne.empty() ? 0 : t.ne[0];
    const size_t in_row = ne0 > 0 ? row_bytes(t.type, ne0) : 0;
    const int64_t data_rows = ne0 > 0 ? static_cast<int64_t>(t.n_bytes / in_row) : 0;
    const int64_t n_rows = t.row_map.empty() ? data_rows : static_cast<int64_t>(t.row_map.size());
    for (int64_t r : t.row_map)
      if (r < 0 || r >= data_rows)
        throw Error(origin + ": tensor '" + t.name + "': row map entry " + std::to_string(r) + " is past its " +
                    std::to_string(data_rows) + " rows");
    if (!t.row_map.empty()) {
      int64_t rows = 1;
      for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
      if (rows != n_rows)
        throw Error(origin + ": tensor '" + t.name + "': row map of " + std::to_string(n_rows) + " rows for a shape of " +
                    std::to_string(rows));
    }
    res.in_bytes += t.row_map.empty() ? t.n_bytes : static_cast<size_t>(n_rows) * in_row;
    res.out_bytes += n_bytes;
    // Rows in output order: row r of the output is input row row_map[r].
    if (t.fill && !t.row_map.empty())
      throw Error(origin + ": tensor '" + t.name + "' has both a row map and a row source");
    auto rows_at = [&](int64_t r0, int64_t n) -> const uint8_t* {
      if (t.fill) {
        gathered.resize(static_cast<size_t>(n) * in_row);
        t.fill(r0, n, gathered.data());
        return gathered.data();
      }
      if (t.row_map.empty()) return t.data + static_cast<size_t>(r0) * in_row;
      gathered.resize(static_cast<size_t>(n) * in_row);
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(gathered.data() + r * in_row, t.data + static_cast<size_t>(t.row_map[r0 + r]) * in_row, in_row);
      return gathered.data();
    };
    if (!c.quantize) {
      if (t.row_map.empty() && !t.fill) {
        write(t.data, t.n_bytes);
      } else {
        for (int64_t r = 0; r < n_rows; ++r) write(rows_at(r, 1), in_row);
      }
    } else {
      const size_t out_row = row_bytes(c.type, ne0);
      const int64_t chunk_rows =
          std::max<int64_t>(1, std::min<int64_t>(n_rows, static_cast<int64_t>(kChunkBytes / std::max<size_t>(1, out_row))));
      chunk.resize(static_cast<size_t>(chunk_rows) * out_row);
      for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
        const int64_t n = std::min(chunk_rows, n_rows - r0);
        int64_t bad = -1;
        convert_rows(rows_at(r0, n), t.type, n, ne0, c.type, chunk.data(), &pool, bufs, &bad);
        if (bad >= 0)
          throw Error(origin + ": tensor '" + t.name + "': row " + std::to_string(r0 + bad) +
                      " has a non-finite value (inf or NaN)");
        write(chunk.data(), static_cast<size_t>(n) * out_row);
      }
    }
    if (options.progress) {
      Progress p;
      p.index = i;
      p.count = tensors.size();
      p.input = in;
      p.name = t.name;
      p.choice = &c;
      p.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      options.progress(p);
    }
  };

  const std::string tmp = out_path + ".tmp";
  try {
    try {
      w.write_file(tmp, source);
    } catch (const GGUFError& e) {
      throw Error("cannot write " + out_path + ": " + e.what());
    }
    if (std::rename(tmp.c_str(), out_path.c_str()) != 0)
      throw Error("cannot write " + out_path + ": rename from " + tmp + ": " + std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return res;
}

Result quantize_gguf(const gguf::File& in, const std::vector<TensorChoice>& choices, uint32_t file_type,
                     const std::string& out_path, const Options& options) {
  std::vector<InputTensor> ts;
  ts.reserve(in.tensors().size());
  for (const gguf::TensorInfo& t : in.tensors()) ts.push_back({t.name, t.type, t.ne, t.data, t.n_bytes, {}, {}});
  return quantize_tensors(in.version(), in.metadata(), ts, choices, file_type, out_path, options, in.path(), &in);
}

Result quantize_file(const std::string& in_path, const std::string& out_path, const QuantType& type,
                     const Options& options) {
  std::unique_ptr<gguf::File> in = gguf::File::open(in_path);
  std::vector<TensorDesc> descs;
  descs.reserve(in->tensors().size());
  for (const gguf::TensorInfo& t : in->tensors()) descs.push_back(TensorDesc{t.name, t.ne, t.type});
  int64_t n_layer = 0;
  const std::string arch = in->get_string("general.architecture", "");
  if (!arch.empty()) {
    if (const gguf::Value* v = in->find(arch + ".block_count")) {
      try {
        n_layer = v->as_int();
      } catch (const Error&) {
        n_layer = 0;
      }
    }
  }
  const std::vector<TensorChoice> choices = plan(descs, type, n_layer);
  return quantize_gguf(*in, choices, type.file_type, out_path, options);
}

}  // namespace kvad::quant
