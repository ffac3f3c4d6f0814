#include "engine/painter.h"

#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>

#include "base/error.h"
#include "base/thread_pool.h"
#include "engine/diffusion/latents.h"
#include "engine/diffusion/scheduler.h"
#include "engine/diffusion/torch_rng.h"
#include "model/image/clip_text.h"
#include "model/image/unet.h"
#include "model/image/vae.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace kvad {

using diffusion::ImageDims;
using diffusion::SchedulerChoice;
using diffusion::SchedulerParams;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void check_side(const char* what, int64_t v, int64_t multiple) {
  if (v == 0) return;
  if (v < kPaintMinSide || v > kPaintMaxSide || v % multiple != 0)
    throw Error(std::string(what) + " " + std::to_string(v) + " is out of range (a multiple of " +
                std::to_string(multiple) + " from " + std::to_string(kPaintMinSide) + " to " +
                std::to_string(kPaintMaxSide) + ")");
}

void check_text(const char* what, const std::string& s) {
  if (s.size() > kPaintMaxPromptBytes)
    throw Error(std::string(what) + " is " + std::to_string(s.size()) + " bytes, over the " +
                std::to_string(kPaintMaxPromptBytes) + " accepted (the tokenizer keeps 77 tokens)");
}

std::string name_of(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // a trailing '/'
  if (p.extension() == ".safetensors") return p.stem().string();
  return p.filename().string();
}

// Host floats of a tensor (any device).
std::vector<float> host_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  ops::to_host(t.is_contiguous() ? t : ops::cont(t), v.data());
  return v;
}

void check_shape(const char* what, const Tensor& t, std::array<int64_t, 4> want) {
  if (t.type != DType::F32 || t.ne != want)
    throw Error(std::string(what) + " returned " + shape_str(t) + " " + dtype_name(t.type) + ", expected [" +
                std::to_string(want[0]) + ", " + std::to_string(want[1]) + ", " + std::to_string(want[2]) + ", " +
                std::to_string(want[3]) + "] f32");
}

}  // namespace

void check_paint_request(const PaintRequest& r) {
  check_side("width", r.width, 8);
  check_side("height", r.height, 8);
  if (r.steps < 1 || r.steps > kPaintMaxSteps)
    throw Error("steps " + std::to_string(r.steps) + " is out of range (1 to " + std::to_string(kPaintMaxSteps) + ")");
  if (r.n < 1 || r.n > kPaintMaxImages)
    throw Error("the number of images " + std::to_string(r.n) + " is out of range (1 to " +
                std::to_string(kPaintMaxImages) + ")");
  check_text("the prompt", r.prompt);
  if (r.negative_prompt) check_text("the negative prompt", *r.negative_prompt);
  if (r.cfg && !(std::isfinite(*r.cfg) && *r.cfg >= 0 && *r.cfg <= kPaintMaxCfg))
  {
    char v[32];
    std::snprintf(v, sizeof v, "%g", *r.cfg);
    throw Error(std::string("cfg scale ") + v + " is out of range (0 to " + std::to_string(int(kPaintMaxCfg)) + ")");
  }
  if (r.rng != "torch") throw Error("unknown rng \"" + r.rng + "\" (have: torch)");
  if (!r.scheduler.empty()) diffusion::parse_scheduler_name(r.scheduler);
  if (r.loras.size() > kPaintMaxLoras)
    throw Error(std::to_string(r.loras.size()) + " LoRAs are more than the " + std::to_string(kPaintMaxLoras) +
                " a request may use");
  for (const image::ImageLoraUse& u : r.loras) {
    if (!u.lora) throw Error("a LoRA of the request is not loaded");
    if (!std::isfinite(u.strength) || std::fabs(u.strength) > 1e6) {
      char v[32];
      std::snprintf(v, sizeof v, "%g", u.strength);
      throw Error(u.lora->path + ": strength " + v + " is not a finite number up to 1e6 in size");
    }
  }
}

struct Painter::Adapted {
  std::vector<image::ImageLoraUse> uses;  // the set (pointers and strengths) these models are for
  std::unique_ptr<WeightLoader> wl;
  std::unique_ptr<image::PromptEncoder> text;   // null: the base's (no LoRA touches the text encoders)
  std::unique_ptr<image::UNet2DCondition> unet; // null: the base's
};

std::shared_ptr<const image::ImageLora> Painter::load_lora(const std::string& path,
                                                           const image::LoraLoadOptions& o) const {
  return image::load_image_lora(path, *targets_, o);
}

std::shared_ptr<const image::ImageLora> Painter::cached_lora(const std::string& path,
                                                             const image::LoraLoadOptions& o) const {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto mtime = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  const std::string key = path + "|" + (o.allow_partial ? "1" : "0") + "|" + std::to_string(ec ? 0 : size) + "|" +
                          std::to_string(ec ? 0 : mtime);
  {
    std::lock_guard<std::mutex> g(loras_mu_);
    if (auto it = loras_.find(key); it != loras_.end()) return it->second;
  }
  std::shared_ptr<const image::ImageLora> l = load_lora(path, o);
  std::lock_guard<std::mutex> g(loras_mu_);
  if (loras_.size() >= 64) loras_.clear();  // a bound: the adapters in use stay alive through their requests
  return loras_.emplace(key, std::move(l)).first->second;
}

const Painter::Adapted& Painter::adapted(const std::vector<image::ImageLoraUse>& uses) const {
  auto same = [&](const std::vector<image::ImageLoraUse>& a) {
    if (a.size() != uses.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].lora != uses[i].lora || a[i].strength != uses[i].strength) return false;
    return true;
  };
  if (adapted_ && same(adapted_->uses)) return *adapted_;
  adapted_.reset();  // the old copy goes before the new one is made
  auto a = std::make_unique<Adapted>();
  a->uses = uses;
  bool text = false, unet = false;
  for (const image::ImageLoraUse& u : uses) text |= u.lora->touches_text, unet |= u.lora->touches_unet;
  a->wl = std::make_unique<WeightLoader>(image::merged_source(pl_.weights, uses), device_opts_);
  // Only the changed components are made again; the base load accounted for every tensor.
  if (text) a->text = std::make_unique<image::PromptEncoder>(pl_, *a->wl);
  if (unet) a->unet = std::make_unique<image::UNet2DCondition>(a->wl->root().sub("unet"), pl_.unet);
  adapted_ = std::move(a);
  return *adapted_;
}

double default_cfg(image::PipelineClass c) { return c == image::PipelineClass::StableDiffusionXL ? 5.0 : 7.5; }

std::string scheduler_for_class(const diffusion::SchedulerConfig& cfg) {
  const std::string& c = cfg.class_name();
  if (c == "EulerDiscreteScheduler") return "euler";
  if (c == "EulerAncestralDiscreteScheduler") return "euler_a";
  if (c == "DDIMScheduler") return "ddim";
  if (c == "DPMSolverMultistepScheduler") return "dpm++2m";  // the file's use_karras_sigmas still applies
  return "";
}

Painter::Painter(image::Pipeline pl, const PainterOptions& o) : pl_(std::move(pl)) {
  model_name_ = o.model_name.empty() ? name_of(pl_.path) : o.model_name;
  sched_cfg_ = diffusion::SchedulerConfig::parse(pl_.scheduler_config, pl_.scheduler_config_name);
  default_scheduler_ = scheduler_for_class(sched_cfg_);
  if (default_scheduler_.empty()) {
    default_scheduler_ = "euler";
    default_scheduler_note_ = (sched_cfg_.class_name().empty() ? std::string("the scheduler config names no class")
                                                               : sched_cfg_.class_name() + " is not one kvad runs") +
                              "; euler (EulerDiscreteScheduler over the same config) instead";
  }
  if (pl_.unet.out_channels != pl_.unet.in_channels || pl_.vae.latent_channels != pl_.unet.in_channels)
    throw Error(pl_.path + ": the UNet maps " + std::to_string(pl_.unet.in_channels) + " to " +
                std::to_string(pl_.unet.out_channels) + " channels and the VAE has " +
                std::to_string(pl_.vae.latent_channels) + " latent channels; a text-to-image pipeline needs them equal");
  // diffusers' vae_scale_factor: 2 ** (len(vae.config.block_out_channels) - 1)
  downscale_ = int64_t{1} << (pl_.vae.block_out_channels.empty() ? 0 : pl_.vae.block_out_channels.size() - 1);
  pool_ = std::make_unique<ThreadPool>(o.threads);
  ops::PoolScope scope(*pool_);
  wl_ = std::make_unique<WeightLoader>(pl_.weights, o.device);
  text_ = std::make_unique<image::PromptEncoder>(pl_, *wl_);
  unet_ = std::make_unique<image::UNet2DCondition>(wl_->root().sub("unet"), pl_.unet);
  vae_ = std::make_unique<image::AutoencoderKL>(wl_->root().sub("vae"), pl_.vae);
  wl_->finish();
  device_opts_ = o.device;
  targets_ = std::make_unique<image::LoraTargets>(pl_);
}

Painter::~Painter() = default;

size_t Painter::weight_bytes() const { return wl_->bytes(); }
Device Painter::device() const { return wl_->device(); }

PaintRequest Painter::settle(const PaintRequest& in) const {
  check_paint_request(in);
  PaintRequest r = in;
  const int64_t side = pl_.unet.sample_size * downscale_;
  if (r.width == 0) r.width = side;
  if (r.height == 0) r.height = side;
  check_side("width", r.width, downscale_ > 8 ? downscale_ : 8);
  check_side("height", r.height, downscale_ > 8 ? downscale_ : 8);
  if (!r.cfg) r.cfg = default_cfg(pl_.pipeline_class);
  r.scheduler = r.scheduler.empty() ? default_scheduler_
                                    : diffusion::scheduler_name(diffusion::parse_scheduler_name(r.scheduler));
  const SchedulerParams sp = sched_cfg_.resolve(diffusion::parse_scheduler_name(r.scheduler));
  if (r.steps > sp.num_train_timesteps)
    throw Error("steps " + std::to_string(r.steps) + " is more than the scheduler's " +
                std::to_string(sp.num_train_timesteps) + " train timesteps");
  return r;
}

PaintResult Painter::paint(const PaintRequest& req, const PaintCallback& progress,
                           const std::atomic<bool>* cancel) const {
  const PaintRequest r = settle(req);
  ops::PoolScope scope(*pool_);
  std::vector<image::ImageLoraUse> uses;
  for (const image::ImageLoraUse& u : r.loras)
    if (u.strength != 0) uses.push_back(u);
  std::unique_lock<std::mutex> lock(adapted_mu_, std::defer_lock);
  const image::PromptEncoder* text_enc = text_.get();
  const image::UNet2DCondition* unet = unet_.get();
  if (!uses.empty()) {
    lock.lock();
    const Adapted& a = adapted(uses);
    if (a.text) text_enc = a.text.get();
    if (a.unet) unet = a.unet.get();
  }
  PaintResult res;
  const Device dev = wl_->device();
  const bool xl = pl_.pipeline_class == image::PipelineClass::StableDiffusionXL;
  const double cfg = *r.cfg;
  // diffusers: do_classifier_free_guidance = guidance_scale > 1 (and no time_cond_proj_dim)
  const bool guided = cfg > 1.0;
  const int64_t n = r.n, batch = guided ? 2 * n : n;
  const ImageDims ld{n, pl_.unet.in_channels, r.height / downscale_, r.width / downscale_};
  auto cancelled = [&](const std::string& where) {
    if (cancel && cancel->load()) throw PaintCancelled("painting cancelled " + where);
  };

  // The prompt's conditioning, batched as diffusers does: [negative] * n + [prompt] * n.
  Clock::time_point t0 = Clock::now();
  const image::PromptEmbeds pos = text_enc->encode(r.prompt);
  std::optional<image::PromptEmbeds> neg;
  if (guided) neg = text_enc->negative(r.negative_prompt);
  const int64_t E = pos.hidden.ne[0], T = pos.hidden.ne[1];
  if (E != pl_.unet.cross_attention_dim)
    throw Error(pl_.path + ": the text encoders give " + std::to_string(E) +
                " features, the UNet's cross_attention_dim is " + std::to_string(pl_.unet.cross_attention_dim));
  auto batched = [&](const Tensor& p, const Tensor* q, std::array<int64_t, 4> ne) {
    const std::vector<float> a = host_floats(p), b = q ? host_floats(*q) : std::vector<float>{};
    std::vector<float> all;
    all.reserve(a.size() * static_cast<size_t>(batch));
    for (int64_t i = 0; i < n && q; ++i) all.insert(all.end(), b.begin(), b.end());
    for (int64_t i = 0; i < n; ++i) all.insert(all.end(), a.begin(), a.end());
    return ops::from_host(all.data(), DType::F32, ne, dev);
  };
  const Tensor context = batched(pos.hidden, neg ? &neg->hidden : nullptr, {E, T, batch, 1});
  image::UNetAddedCond added;
  if (xl) {
    const int64_t P = pos.pooled.ne[0];
    added.text_embeds = batched(pos.pooled, neg ? &neg->pooled : nullptr, {P, batch, 1, 1});
    // _get_add_time_ids: original_size + crops_coords_top_left + target_size
    const float h = static_cast<float>(r.height), w = static_cast<float>(r.width);
    std::vector<float> ids;
    for (int64_t i = 0; i < batch; ++i) ids.insert(ids.end(), {h, w, 0.0f, 0.0f, h, w});
    added.time_ids = ops::from_host(ids.data(), DType::F32, {6, batch, 1, 1}, dev);
  }
  res.stats.encode_s = seconds_since(t0);

  // The initial noise, then the scheduler's loop over the UNet.
  const SchedulerParams sp = sched_cfg_.resolve(diffusion::parse_scheduler_name(r.scheduler));
  const std::unique_ptr<diffusion::Scheduler> sched = diffusion::make_scheduler(sp, r.steps);
  diffusion::TorchGenerator gen(r.seed);
  std::vector<float> latents(static_cast<size_t>(ld.count()));
  gen.randn(latents);
  const float sigma0 = sched->init_noise_sigma();
  for (float& v : latents) v *= sigma0;

  const size_t per = latents.size();
  const ImageDims bd{batch, ld.c, ld.h, ld.w};
  std::vector<float> in_cwhn(per * static_cast<size_t>(batch / n)), out_cwhn(in_cwhn.size()),
      out_nchw(in_cwhn.size());
  const diffusion::DenoiseFn denoise = [&](std::span<const float> x, float t, std::span<float> out) {
    diffusion::nchw_to_cwhn(x, std::span(in_cwhn).first(per), ld);
    if (guided)  // cat([latents] * 2): the same input for the negative and the prompt halves
      std::copy(in_cwhn.begin(), in_cwhn.begin() + static_cast<ptrdiff_t>(per),
                in_cwhn.begin() + static_cast<ptrdiff_t>(per));
    const Tensor sample = ops::from_host(in_cwhn.data(), DType::F32, {ld.c, ld.w, ld.h, batch}, dev);
    const Tensor eps = unet->forward(sample, t, context, xl ? &added : nullptr);
    check_shape("the UNet", eps, {ld.c, ld.w, ld.h, batch});
    ops::to_host(eps, out_cwhn.data());
    diffusion::cwhn_to_nchw(out_cwhn, out_nchw, bd);
    if (guided)
      diffusion::guidance_combine(std::span(out_nchw).first(per), std::span(out_nchw).subspan(per),
                                  static_cast<float>(cfg), out);
    else
      std::copy(out_nchw.begin(), out_nchw.end(), out.begin());
  };
  t0 = Clock::now();
  Clock::time_point last = t0;
  const int64_t total = static_cast<int64_t>(sched->steps());
  auto on_step = [&](size_t i) {
    const Clock::time_point now = Clock::now();
    if (progress) {
      PaintProgress p;
      p.step = static_cast<int64_t>(i) + 1;
      p.total = total;
      p.step_s = std::chrono::duration<double>(now - last).count();
      p.elapsed_s = std::chrono::duration<double>(now - t0).count();
      p.latents = latents;
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

  // latents / scaling_factor through the VAE, then to bytes.
  t0 = Clock::now();
  const float sf = static_cast<float>(pl_.vae.scaling_factor);
  for (float& v : latents) v = v / sf;
  std::vector<float> z(per);
  diffusion::nchw_to_cwhn(latents, z, ld);
  const Tensor image = vae_->decode(ops::from_host(z.data(), DType::F32, {ld.c, ld.w, ld.h, n}, dev));
  check_shape("the VAE decoder", image, {3, r.width, r.height, n});
  const std::vector<float> pixels = host_floats(image);  // {3, W, H, N}: each image's RGB rows, top to bottom
  const size_t image_values = static_cast<size_t>(3 * r.width * r.height);
  const SchedulerChoice choice = diffusion::parse_scheduler_name(r.scheduler);
  for (int64_t i = 0; i < n; ++i) {
    PaintedImage& im = res.images.emplace_back();
    im.width = r.width;
    im.height = r.height;
    im.rgb.resize(image_values);
    diffusion::to_rgb8(std::span(pixels).subspan(static_cast<size_t>(i) * image_values, image_values), im.rgb);
    png::Parameters& m = im.parameters;
    m.prompt = r.prompt;
    m.negative_prompt = r.negative_prompt.value_or("");
    m.steps = static_cast<int>(r.steps);
    m.sampler = diffusion::a1111_sampler_name(choice.kind);
    m.schedule_type = sp.use_karras_sigmas ? "Karras" : "";
    m.cfg_scale = cfg;
    m.seed = r.seed;
    m.width = r.width;
    m.height = r.height;
    m.model = model_name_;
  }
  res.stats.decode_s = seconds_since(t0);
  return res;
}

}  // namespace kvad
