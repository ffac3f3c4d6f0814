// `kvad images make PROMPT --model M`: paint a picture with a Stable
// Diffusion 1.5 or SDXL pipeline (engine/painter.h) and write it as a PNG
// with AUTOMATIC1111's `parameters` text chunk.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/generation_options.h"
#include "cli/image_output.h"
#include "cli/model_store.h"
#include "engine/diffusion/latents.h"
#include "engine/painter.h"
#include "hub/repo_spec.h"
#include "io/png.h"
#include "model/image/latent_preview.h"
#include "model/image/lora.h"
#include "model/image/pipeline.h"
#include "tensor/ops.h"

namespace fs = std::filesystem;

namespace kvad::cli {

namespace {

struct MakeOptions {
  std::string prompt, model, output, negative_prompt, scheduler, rng = "torch", preview, config, vae, lora_dir;
  std::vector<std::string> loras;  // FILE[:SCALE]
  bool lora_allow_partial = false;
  int64_t width = 0, height = 0, steps = 20, n = 1, seed = -1, preview_every = 1;
  double cfg = 0;
  int threads = 0;
  DeviceOptions device;
  CLI::Option *negative = nullptr, *cfg_given = nullptr;  // given or not: the pipeline's default otherwise
};

/// A --model argument to what image::open_pipeline reads, and the name the
/// pictures' metadata give it.
struct PipelinePath {
  std::string path, name;
};

PipelinePath resolve_pipeline(const std::string& arg) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) return {arg, ""};
  if (image::is_diffusers_folder(arg)) return {arg, ""};
  if (fs::is_directory(arg, ec))
    throw Error("model '" + arg + "' is a folder without model_index.json (not a diffusers pipeline)");
  if (hub::looks_like_repo_spec(arg)) {
    // A pipeline repo setup placed in the store under its name, else the HF cache (pulled when missing).
    const fs::path stored = fs::path(model_store_dir()) / arg;
    if (arg.find_first_of("@:") == std::string::npos && image::is_diffusers_folder(stored.string()))
      return {stored.string(), arg};
    const ResolvedModel r = resolve_model_full(arg);
    if (!image::is_diffusers_folder(r.path) && !fs::is_regular_file(r.path, ec))
      throw Error("model '" + arg + "' resolves to " + r.path + ", which is not a diffusers pipeline (no "
                  "model_index.json) nor a single .safetensors file");
    return {r.path, hub::parse_repo_spec(arg).repo};
  }
  throw Error("model '" + arg + "' not found: not a file, not a diffusers folder, and not ORG/NAME of a pipeline "
              "repo");
}

// Request bounds are usage errors (status 2), found before any weight is read.
// The LoRAs a request names: --lora FILE[:SCALE] and the prompt's <lora:NAME:SCALE> tags.
struct LoraArgs {
  std::vector<std::pair<std::string, float>> files;  // path, strength
};

PaintRequest request_of(const MakeOptions& o, LoraArgs* loras) {
  PaintRequest r;
  std::vector<image::LoraTag> tags;
  try {
    std::tie(r.prompt, tags) = image::extract_lora_tags(o.prompt);
    for (const std::string& a : o.loras) loras->files.push_back(image::parse_image_lora_arg(a));
    const std::string dir = o.lora_dir.empty() ? (fs::path(kvad_home()) / "loras").string() : o.lora_dir;
    for (const image::LoraTag& t : tags) loras->files.emplace_back(image::resolve_lora_name(dir, t.name), t.strength);
  } catch (const Error& e) {
    throw CLI::ValidationError(e.what());
  }
  if (o.negative->count() > 0) r.negative_prompt = o.negative_prompt;
  r.width = o.width;
  r.height = o.height;
  r.steps = o.steps;
  if (o.cfg_given->count() > 0) r.cfg = o.cfg;
  r.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  r.scheduler = o.scheduler;
  r.n = o.n;
  r.rng = o.rng;
  try {
    check_paint_request(r);
  } catch (const Error& e) {
    throw CLI::ValidationError(e.what());
  }
  if (!o.output.empty() && fs::path(o.output).extension() != ".png")
    throw CLI::ValidationError("-o/--output", "a PNG file name ending in .png, got '" + o.output + "'");
  if (!o.preview.empty() && fs::path(o.preview).extension() != ".png")
    throw CLI::ValidationError("--preview", "a PNG file name ending in .png, got '" + o.preview + "'");
  if (!o.preview.empty() && o.preview == o.output)
    throw CLI::ValidationError("--preview", "must not be the output file");
  return r;
}

// The first picture's latent after a step as a quick look (model/image/latent_preview.h:
// a fitted linear map of the channels, no VAE), each latent pixel `f` x `f` pixels.
void write_preview(const std::string& path, const PaintProgress& p, int64_t f) {
  const diffusion::ImageDims d{1, p.channels, p.latent_h, p.latent_w};
  std::vector<float> z(static_cast<size_t>(d.count()));
  diffusion::nchw_to_cwhn(p.latents.first(z.size()), z, d);
  const std::vector<uint8_t> small =
      image::latent_preview_rgb(ops::wrap_host(z.data(), DType::F32, {d.c, d.w, d.h, 1}));
  const int64_t W = d.w * f, H = d.h * f;
  std::vector<uint8_t> rgb(static_cast<size_t>(W * H * 3));
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c)
        rgb[static_cast<size_t>((y * W + x) * 3 + c)] = small[static_cast<size_t>(((y / f) * d.w + x / f) * 3 + c)];
  png::write_rgb8(path, rgb, W, H,
                  {{"Description", "kvad preview after step " + std::to_string(p.step) + " of " +
                                       std::to_string(p.total) + " (latent colours, not the decoded picture)"}});
}

void make(const MakeOptions& o) {
  LoraArgs la;
  PaintRequest req = request_of(o, &la);
  const PipelinePath pp = resolve_pipeline(o.model);
  image::PipelineOptions popt;
  if (!o.config.empty()) popt.config = resolve_pipeline(o.config).path;
  if (!o.vae.empty()) popt.vae = o.vae;
  image::Pipeline pl = image::open_pipeline(pp.path, popt);
  PainterOptions po;
  po.device = o.device;
  po.threads = o.threads;
  po.model_name = pp.name;
  const Painter painter(std::move(pl), po);
  image::LoraLoadOptions lo;
  lo.allow_partial = o.lora_allow_partial;
  for (const auto& [path, strength] : la.files) {
    std::shared_ptr<const image::ImageLora> l = painter.load_lora(path, lo);
    std::fprintf(stderr, "kvad: LoRA %s (%s, %zu weights, %.1f MiB) at %g\n", path.c_str(), l->spelling.c_str(),
                 l->modules.size(), l->bytes / 1048576.0, strength);
    req.loras.push_back({std::move(l), strength});
  }
  const PaintRequest r = painter.settle(req);
  if (req.scheduler.empty() && !painter.default_scheduler_note().empty())
    std::fprintf(stderr, "kvad: %s\n", painter.default_scheduler_note().c_str());
  std::fprintf(stderr, "kvad: %s (%s, %.1f MiB on %s): %lldx%lld, %lld steps of %s, cfg %g, seed %llu, %lld image%s\n",
               painter.model_name().c_str(), image::pipeline_class_name(painter.pipeline().pipeline_class),
               painter.weight_bytes() / 1048576.0, painter.device().str().c_str(), static_cast<long long>(r.width),
               static_cast<long long>(r.height), static_cast<long long>(r.steps), r.scheduler.c_str(), *r.cfg,
               static_cast<unsigned long long>(r.seed), static_cast<long long>(r.n), r.n == 1 ? "" : "s");
  StepProgress bar(stderr);
  const PaintResult res = painter.paint(r, [&](const PaintProgress& p) {
    if (!o.preview.empty() && (p.step % o.preview_every == 0 || p.step == p.total))
      write_preview(o.preview, p, painter.downscale());
    bar.on_step(p.step, p.total, p.step_s, p.elapsed_s);
  });
  bar.finish();
  const std::string wanted = o.output.empty() ? image_stem(r.prompt, r.seed) + ".png" : o.output;
  for (const PaintedImage& im : res.images) {
    const std::string path = reserve_image_path(wanted);
    try {
      png::Parameters pm = im.parameters;
      pm.prompt = o.prompt;  // with its <lora:...> tags, as A1111 writes it
      png::write_rgb8(path, im.rgb, im.width, im.height, {{"parameters", png::a1111_parameters(pm)}});
    } catch (...) {
      std::error_code ec;
      fs::remove(path, ec);  // the empty name reserved for it
      throw;
    }
    std::printf("%s\n", path.c_str());
  }
  std::fprintf(stderr, "kvad: text %.2f s | denoise %.2f s (%.2f s/step) | decode %.2f s | peak RSS %.1f MiB\n",
               res.stats.encode_s, res.stats.denoise_s, res.stats.denoise_s / static_cast<double>(r.steps),
               res.stats.decode_s, peak_rss_bytes() / 1048576.0);
}

}  // namespace

void add_images(CLI::App& app) {
  CLI::App* images = app.add_subcommand("images", "Make pictures with a Stable Diffusion 1.5 or SDXL pipeline");
  images->require_subcommand(1);
  auto o = std::make_shared<MakeOptions>();
  CLI::App* c = images->add_subcommand("make", "Paint a picture from a prompt and write it as a PNG");
  c->add_option("prompt", o->prompt, "What to paint")->required();
  c->add_option("-m,--model", o->model,
                "A diffusers pipeline folder (model_index.json), a single-file .safetensors checkpoint (SD 1.5 or "
                "SDXL, Stability's layout), or ORG/NAME of a pipeline repo (the HF cache; pulled when missing)")
      ->required();
  c->add_option("--config", o->config,
                "For a single file: a diffusers pipeline folder (or ORG/NAME) whose configs, tokenizers and scheduler "
                "describe it (as diffusers' from_single_file(config=...)); a single file carries no tokenizer, so "
                "it needs one");
  c->add_option("--vae", o->vae, "A diffusers VAE folder (config.json + safetensors) used instead of the checkpoint's own");
  c->add_option("-o,--output", o->output,
                "The PNG to write (default: the prompt's first words and the seed); an existing file is never "
                "replaced: NAME-1.png, NAME-2.png, ... instead");
  c->add_option("--width", o->width, "Width in pixels, a multiple of 8 from 64 to 2048 (default: the model's)")
      ->check(integer_check());
  c->add_option("--height", o->height, "Height in pixels, a multiple of 8 from 64 to 2048 (default: the model's)")
      ->check(integer_check());
  c->add_option("--steps", o->steps, "Denoising steps, 1 to 1000")->check(integer_check())->capture_default_str();
  o->cfg_given = c->add_option("--cfg", o->cfg, "Classifier-free guidance scale, 0 to 100 (default: 7.5 for SD 1.5, 5 for SDXL; <= 1: none)");
  c->add_option("--seed", o->seed, "Noise seed (-1: random)")
      ->check(integer_check())
      ->check(CLI::Range(int64_t{-1}, INT64_MAX))
      ->capture_default_str();
  std::string names;
  for (const std::string& s : diffusion::scheduler_names()) names += (names.empty() ? "" : ", ") + s;
  c->add_option("--scheduler", o->scheduler,
                "Scheduler: " + names + " (default: the pipeline's own, or euler when kvad does not run it)");
  o->negative = c->add_option("--negative-prompt", o->negative_prompt, "What not to paint");
  c->add_option("-n,--images", o->n, "Pictures to make from the one noise draw, 1 to 16")
      ->check(integer_check())
      ->capture_default_str();
  c->add_option("--rng", o->rng, "Noise generator: torch (torch.randn on the CPU generator, as diffusers)")
      ->capture_default_str();
  c->add_option("--preview", o->preview,
                "A PNG rewritten every --preview-every steps (and after the last) with the first picture's latent "
                "seen through a fitted linear map of its channels: a quick look, not the VAE's picture");
  c->add_option("--preview-every", o->preview_every, "Steps between previews, 1 to 1000")
      ->check(integer_check())
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  c->add_option("--lora", o->loras,
                "A LoRA .safetensors (kohya, LyCORIS LoCon/LoHa/LoKr, PEFT or diffusers spellings) and its strength: "
                "FILE[:SCALE] (default 1); repeatable. The prompt's <lora:NAME:SCALE> tags name files in --lora-dir");
  c->add_option("--lora-dir", o->lora_dir, "Where <lora:NAME> tags are looked up: NAME.safetensors (default "
                                            "$KVAD_HOME/loras)");
  c->add_flag("--lora-allow-partial", o->lora_allow_partial,
              "Apply a LoRA even when some of its tensors fit no weight of the pipeline (a warning counts them)");
  add_threads_option(c, o->threads);
  c->add_option("--device", o->device.device, "Where the models run: cpu, cuda, or sim (host memory behind a "
                                              "device boundary; for checks)")
      ->check(CLI::IsMember({"cpu", "cuda", "sim"}))
      ->capture_default_str();
  c->add_option("--dtype", o->device.dtype, "cuda: the format of the weights")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}))
      ->capture_default_str();
  c->callback([o] { make(*o); });
}

}  // namespace kvad::cli
