#include "engine/flux_painter.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/diffusion/latents.h"
#include "engine/diffusion/torch_rng.h"
#include "model/image/clip_text.h"
#include "model/image/flux.h"
#include "model/image/t5_encoder.h"
#include "model/image/vae.h"
#include "model/weights.h"
#include "tensor/ops.h"
#include "tokenizer/clip.h"
#include "tokenizer/t5.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

using diffusion::ImageDims;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<float> host_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  ops::to_host(t.is_contiguous() ? t : ops::cont(t), v.data());
  return v;
}

void check_side16(const char* what, int64_t v) {
  if (v < kPaintMinSide || v > kPaintMaxSide || v % 16 != 0)
    throw Error(std::string(what) + " " + std::to_string(v) + " is out of range for FLUX (a multiple of 16 from " +
                std::to_string(kPaintMinSide) + " to " + std::to_string(kPaintMaxSide) + ")");
}

}  // namespace

FluxPainter::FluxPainter(const image::Pipeline& pl, WeightLoader& wl) : pl_(pl) {
  sched_ = diffusion::flow_match_params(
      diffusion::SchedulerConfig::parse(pl.scheduler_config, pl.scheduler_config_name));
  clip_tok_ = std::make_unique<ClipTokenizer>(ClipTokenizer::from_folder(pl.tokenizer));
  t5_tok_ = t5_tokenizer(pl.tokenizer_2);
  clip_ = std::make_unique<image::ClipTextEncoder>(wl.root().sub("text_encoder"), pl.text_encoder);
  nlohmann::json t5_cfg;
  try {
    t5_cfg = nlohmann::json::parse(pl.t5_config);
  } catch (const nlohmann::json::exception& e) {
    throw Error(pl.t5_config_name + ": invalid JSON: " + e.what());
  }
  const image::T5Config tc = image::parse_t5_config(t5_cfg, pl.t5_config_name);
  if (tc.d_model != pl.transformer->joint_attention_dim)
    throw Error(pl.t5_config_name + ": d_model " + std::to_string(tc.d_model) +
                " is not the transformer's joint_attention_dim " + std::to_string(pl.transformer->joint_attention_dim));
  t5_ = std::make_unique<image::T5Encoder>(wl.root().sub("text_encoder_2"), tc);
  transformer_ = std::make_unique<image::FluxTransformer2D>(wl.root().sub("transformer"), *pl.transformer);
  vae_ = std::make_unique<image::AutoencoderKL>(wl.root().sub("vae"), pl.vae);
}

FluxPainter::~FluxPainter() = default;

PaintRequest FluxPainter::settle(const PaintRequest& in) const {
  check_paint_request(in);
  PaintRequest r = in;
  const int64_t side = 128 * 8;  // FluxPipeline's default_sample_size × vae_scale_factor
  if (r.width == 0) r.width = side;
  if (r.height == 0) r.height = side;
  check_side16("width", r.width);
  check_side16("height", r.height);
  if (!r.cfg) r.cfg = kFluxDefaultGuidance;
  if (!r.scheduler.empty() && diffusion::parse_scheduler_name(r.scheduler).kind != diffusion::SchedulerKind::Euler)
    throw Error("scheduler " + r.scheduler + " is not one FLUX runs (it has euler: FlowMatchEulerDiscreteScheduler)");
  r.scheduler = "euler";
  return r;
}

PaintResult FluxPainter::paint(const PaintRequest& req, const PaintCallback& progress,
                               const std::atomic<bool>* cancel, const std::string& model_name) const {
  const PaintRequest r = settle(req);
  PaintResult res;
  const Device dev = transformer_->device();
  const image::FluxTransformerConfig& tc = transformer_->config();
  const int64_t n = r.n;
  auto cancelled = [&](const std::string& where) {
    if (cancel && cancel->load()) throw PaintCancelled("painting cancelled " + where);
  };

  // The prompt: CLIP's pooled output and T5's hidden states, repeated for each image.
  Clock::time_point t0 = Clock::now();
  const Tensor pooled1 = clip_->encode(clip_tok_->encode_padded(r.prompt), image::ClipTextEncoder::Layer::Last, true).pooled;
  const std::vector<int32_t> ids = t5_prompt_ids(*t5_tok_, r.prompt, kFluxMaxSequenceLength);
  const Tensor hidden1 = t5_->encode(ids);  // [n_txt, d_model]
  const int64_t n_txt = hidden1.ne[1], E = hidden1.ne[0], P = pooled1.n_elements();
  auto repeat = [&](const Tensor& t, std::array<int64_t, 4> ne) {
    const std::vector<float> one = host_floats(t);
    std::vector<float> all;
    for (int64_t i = 0; i < n; ++i) all.insert(all.end(), one.begin(), one.end());
    return ops::from_host(all.data(), DType::F32, ne, dev);
  };
  image::FluxTransformer2D::Input in;
  in.encoder_hidden_states = repeat(hidden1, {E, n_txt, n, 1});
  in.pooled_projections = repeat(pooled1, {P, n, 1, 1});
  in.txt_ids.assign(static_cast<size_t>(n_txt * 3), 0.0f);
  if (tc.guidance_embeds) in.guidance = static_cast<float>(*r.cfg);  // torch.full([1], guidance_scale, float32)
  res.stats.encode_s = seconds_since(t0);

  // prepare_latents: 2·(side // (8·2)) latent rows and columns, drawn in NCHW, then packed.
  const int64_t f = int64_t{1} << (pl_.vae.block_out_channels.size() - 1);
  const ImageDims ld{n, tc.in_channels / 4, 2 * (r.height / (f * 2)), 2 * (r.width / (f * 2))};
  const int64_t gh = ld.h / 2, gw = ld.w / 2, L = gh * gw;
  for (int64_t y = 0; y < gh; ++y)
    for (int64_t x = 0; x < gw; ++x) in.img_ids.insert(in.img_ids.end(), {0.0f, float(y), float(x)});
  diffusion::TorchGenerator gen(r.seed);
  std::vector<float> noise(static_cast<size_t>(ld.count())), latents(noise.size()), nchw(noise.size());
  gen.randn(noise);
  diffusion::pack_latents(noise, latents, ld);

  const std::unique_ptr<diffusion::Scheduler> sched =
      diffusion::make_flow_match(sched_, r.steps, diffusion::flux_mu(sched_, L));
  const diffusion::DenoiseFn denoise = [&](std::span<const float> x, float t, std::span<float> out) {
    in.hidden_states = ops::from_host(x.data(), DType::F32, {tc.in_channels, L, n, 1}, dev);
    in.timestep = t / 1000.0f;  // FluxPipeline passes timestep / 1000 in the latents' dtype
    const Tensor v = transformer_->forward(in);
    ops::to_host(v, out.data());
  };
  t0 = Clock::now();
  Clock::time_point last = t0;
  const int64_t total = static_cast<int64_t>(sched->steps());
  auto on_step = [&](size_t i) {
    const Clock::time_point now = Clock::now();
    if (progress) {
      diffusion::unpack_latents(latents, nchw, ld);
      PaintProgress p;
      p.step = static_cast<int64_t>(i) + 1;
      p.total = total;
      p.step_s = std::chrono::duration<double>(now - last).count();
      p.elapsed_s = std::chrono::duration<double>(now - t0).count();
      p.latents = nchw;
      p.n = n;
      p.channels = ld.c;
      p.latent_h = ld.h;
      p.latent_w = ld.w;
      progress(p);
    }
    last = Clock::now();
    if (static_cast<int64_t>(i) + 1 < total)
      cancelled("after step " + std::to_string(i + 1) + " of " + std::to_string(total));
  };
  cancelled("before the first step");
  diffusion::run_denoising(*sched, latents, denoise, &gen, on_step);
  res.stats.denoise_s = seconds_since(t0);
  cancelled("before decoding");

  // _unpack_latents, latents / scaling_factor + shift_factor, the VAE, bytes.
  t0 = Clock::now();
  diffusion::unpack_latents(latents, nchw, ld);
  const float sf = static_cast<float>(pl_.vae.scaling_factor), sh = static_cast<float>(pl_.vae.shift_factor);
  for (float& v : nchw) v = v / sf + sh;
  std::vector<float> z(nchw.size());
  diffusion::nchw_to_cwhn(nchw, z, ld);
  const Tensor image = vae_->decode(ops::from_host(z.data(), DType::F32, {ld.c, ld.w, ld.h, n}, dev));
  const int64_t W = ld.w * f, H = ld.h * f;
  if (image.ne != std::array<int64_t, 4>{3, W, H, n})
    throw Error("the VAE decoder returned " + shape_str(image) + ", expected 3 channels of " + std::to_string(W) +
                "×" + std::to_string(H));
  const std::vector<float> pixels = host_floats(image);
  const size_t per = static_cast<size_t>(3 * W * H);
  for (int64_t i = 0; i < n; ++i) {
    PaintedImage& im = res.images.emplace_back();
    im.width = W;
    im.height = H;
    im.rgb.resize(per);
    diffusion::to_rgb8(std::span(pixels).subspan(static_cast<size_t>(i) * per, per), im.rgb);
    png::Parameters& m = im.parameters;
    m.prompt = r.prompt;
    m.steps = static_cast<int>(r.steps);
    m.sampler = "Euler";
    m.cfg_scale = *r.cfg;
    m.seed = r.seed;
    m.width = W;
    m.height = H;
    m.model = model_name;
  }
  res.stats.decode_s = seconds_since(t0);
  return res;
}

}  // namespace kvad
