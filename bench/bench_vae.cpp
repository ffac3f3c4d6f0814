// The VAE (model/image/vae.h) on the CPU at the real shapes, with random
// weights in the layout of SD 1.5's config (block_out_channels 128, 256, 512,
// 512; SDXL's VAE has the same architecture): a plain program that prints
// numbers and asserts nothing.
//   decode512:  a 64×64 latent → a 512×512 image (SD 1.5's default size)
//   encode512:  a 512×512 image → its 64×64 latent mean
//   tiled1024:  a 128×128 latent → 1024×1024 (SDXL's size) with VaeTiling{64, 16}
//               (diffusers' enable_tiling() for SD 1.5's sample_size 512)
//   whole1024:  the same latent without tiling
// Each: wall time of one run (after a warm-up run at 64×64 pixels), and the
// process's peak resident memory (getrusage: run one mode per process to
// read a mode's own peak). f32 weights and activations. attn: the mid
// block's attention alone (one head of 512 over 64×64 tokens).
// Run: build/bench/bench_vae [threads=2] [mode=decode512]
#include <sys/resource.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/tensor_source.h"
#include "model/image/pipeline.h"
#include "model/image/vae.h"
#include "model/weights.h"
#include "tensor/ops.h"

using namespace kvad;
using namespace kvad::image;

namespace {

// Random f32 tensors under diffusers' AutoencoderKL names (no file).
class RandomVae final : public TensorSource {
 public:
  explicit RandomVae(const AutoencoderKLConfig& c) {
    const std::vector<int64_t>& ch = c.block_out_channels;
    const int64_t L = static_cast<int64_t>(ch.size()), z = c.latent_channels, top = ch.back();
    const auto conv = [&](const std::string& n, int64_t in, int64_t out, int64_t k) {
      add(n + ".weight", {k, k, in, out}, 1.0f / std::sqrt(static_cast<float>(in * k * k)));
      add(n + ".bias", {out}, 0.02f);
    };
    const auto norm = [&](const std::string& n, int64_t C) { add(n + ".weight", {C}, 0.1f, 1.0f), add(n + ".bias", {C}, 0.02f); };
    const auto resnet = [&](const std::string& n, int64_t in, int64_t out) {
      norm(n + ".norm1", in), conv(n + ".conv1", in, out, 3), norm(n + ".norm2", out), conv(n + ".conv2", out, out, 3);
      if (in != out) conv(n + ".conv_shortcut", in, out, 1);
    };
    const auto mid = [&](const std::string& n) {
      resnet(n + ".resnets.0", top, top), resnet(n + ".resnets.1", top, top);
      norm(n + ".attentions.0.group_norm", top);
      for (const char* p : {"to_q", "to_k", "to_v", "to_out.0"}) {
        add(n + ".attentions.0." + p + ".weight", {top, top}, 1.0f / std::sqrt(static_cast<float>(top)));
        add(n + ".attentions.0." + p + ".bias", {top}, 0.02f);
      }
    };
    conv("encoder.conv_in", c.in_channels, ch[0], 3);
    for (int64_t i = 0; i < L; ++i) {
      const std::string b = "encoder.down_blocks." + std::to_string(i);
      for (int64_t j = 0; j < c.layers_per_block; ++j)
        resnet(b + ".resnets." + std::to_string(j), j == 0 && i > 0 ? ch[i - 1] : ch[i], ch[i]);
      if (i < L - 1) conv(b + ".downsamplers.0.conv", ch[i], ch[i], 3);
    }
    mid("encoder.mid_block"), norm("encoder.conv_norm_out", top), conv("encoder.conv_out", top, 2 * z, 3);
    conv("decoder.conv_in", z, top, 3), mid("decoder.mid_block");
    for (int64_t i = 0; i < L; ++i) {
      const std::string b = "decoder.up_blocks." + std::to_string(i);
      const int64_t out = ch[L - 1 - i], prev = ch[i == 0 ? L - 1 : L - i];
      for (int64_t j = 0; j <= c.layers_per_block; ++j) resnet(b + ".resnets." + std::to_string(j), j ? out : prev, out);
      if (i < L - 1) conv(b + ".upsamplers.0.conv", out, out, 3);
    }
    norm("decoder.conv_norm_out", ch[0]), conv("decoder.conv_out", ch[0], c.out_channels, 3);
    conv("quant_conv", 2 * z, 2 * z, 1), conv("post_quant_conv", z, z, 1);
    for (size_t i = 0; i < list_.size(); ++i) list_[i].data = data_[i].data();
  }
  const std::string& path() const override { return path_; }
  const std::vector<SourceTensor>& tensors() const override { return list_; }
  const SourceTensor* find(std::string_view name) const override {
    for (const SourceTensor& t : list_)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::shared_ptr<const void> keepalive() const override { return nullptr; }
  bool has(std::string_view) const override { return false; }
  int64_t get_int(std::string_view, int64_t def) const override { return def; }
  int64_t require_int(std::string_view key) const override { throw Error("no key " + std::string(key)); }
  double get_float(std::string_view, double def) const override { return def; }
  std::string get_string(std::string_view, const std::string& def) const override { return def; }

 private:
  void add(const std::string& name, std::vector<int64_t> ne, float scale, float offset = 0.0f) {
    SourceTensor t;
    t.name = name;
    t.n_dims = static_cast<int>(ne.size());
    size_t n = 1;
    for (size_t i = 0; i < ne.size(); ++i) t.ne[i] = ne[i], n *= static_cast<size_t>(ne[i]);
    t.n_bytes = n * 4;
    t.origin = path_;
    t.stored_dtype = "F32";
    for (size_t i = ne.size(); i > 0; --i) t.shape.push_back(ne[i - 1]);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = offset + nd(rng_);
    data_.push_back(std::move(v));
    list_.push_back(std::move(t));
  }
  std::string path_ = "random SD VAE";
  std::mt19937 rng_{1};
  std::vector<std::vector<float>> data_;
  std::vector<SourceTensor> list_;
};

Tensor randn(std::array<int64_t, 4> ne) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(ne[0] * ne[1] * ne[2] * ne[3]));
  for (float& x : v) x = nd(rng);
  return ops::from_host(v.data(), DType::F32, ne, Device::cpu());
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string mode = argc > 2 ? argv[2] : "decode512";
  ThreadPool pool(threads);
  ops::PoolScope scope(pool);
  const nlohmann::json base = nlohmann::json::parse(base_configs(LdmLayout::SD15));
  const AutoencoderKLConfig cfg = parse_vae_config(base.at("vae"), "SD 1.5 base vae config");
  const auto src = std::make_shared<RandomVae>(cfg);
  WeightLoader wl(src, DeviceOptions{});
  const AutoencoderKL vae(wl.root(), cfg);
  std::printf("SD 1.5 VAE, random f32 weights: %.1f M parameters, %d threads; after loading: peak RSS %.0f MiB\n",
              wl.n_params() / 1e6, threads, peak_rss_mib());
  vae.decode(randn({4, 8, 8, 1}));  // warm-up
  const auto run = [&](const char* what, const std::function<Tensor()>& f) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor out = f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-52s %7.2f s wall, %7.2f s CPU (all threads)   peak RSS %5.0f MiB   out %s\n", what, s,
                cpu_seconds() - c0, peak_rss_mib(), shape_str(out).c_str());
  };
  if (mode == "decode512") {
    const Tensor z = randn({4, 64, 64, 1});
    run("decode 64x64 latent -> 512x512", [&] { return vae.decode(z); });
  } else if (mode == "encode512") {
    const Tensor x = randn({3, 512, 512, 1});
    run("encode 512x512 -> 64x64 latent mean", [&] { return vae.encode(x); });
  } else if (mode == "tiled1024") {
    const Tensor z = randn({4, 128, 128, 1});
    run("decode 128x128 latent -> 1024x1024, tiles {64, 16}", [&] { return vae.decode(z, {64, 16}); });
  } else if (mode == "whole1024") {
    const Tensor z = randn({4, 128, 128, 1});
    run("decode 128x128 latent -> 1024x1024, untiled", [&] { return vae.decode(z); });
  } else if (mode == "attn") {  // the mid block's attention alone: one head of 512 over 64×64 tokens
    const Tensor q = randn({512, 1, 4096, 1});
    run("sdpa, 1 head of 512, 4096 tokens", [&] { return ops::sdpa(q, q, q, 1.0f / std::sqrt(512.0f)); });
  } else {
    std::fprintf(stderr, "bench_vae: unknown mode '%s' (decode512, encode512, tiled1024, whole1024, attn)\n", mode.c_str());
    return 2;
  }
  return 0;
}
