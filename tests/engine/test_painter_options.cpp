// The Painter's load and decode options (engine/painter.h) on the tiny
// random SD 1.5 and SDXL pipelines of tests/fixtures/image_pipelines:
//  - PainterOptions::quant "q8_0" through the quantize-once cache
//    (model/image/quantize_pipeline.h): the picture against the same
//    pipeline's f32 picture (PSNR printed, bound below), the entry written
//    once and mapped by the next load (same file, same bytes painted),
//    rewritten when a weights file changes, and what it holds (the rule's
//    tensors in q8_0, convolutions in conv2d's layout; norms, embeddings and
//    the VAE as stored);
//  - PaintRequest::vae_tiling: the tiled decode (Painter::vae_tiling()'s
//    tiles) against the untiled one, and the automatic choice.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "psnr.h"
#include "base/error.h"
#include "engine/painter.h"
#include "io/gguf.h"
#include "model/image/pipeline.h"
#include "model/image/quantize_pipeline.h"

namespace fs = std::filesystem;
using namespace kvad;
using kvad::test::psnr8;

namespace {

fs::path pipelines() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "image_pipelines"; }

// A scratch folder removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kvad-painter-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::unique_ptr<Painter> load(const fs::path& dir, const std::string& quant = "", const fs::path& cache = {},
                              const std::string& device = "cpu") {
  PainterOptions o;
  o.device.device = device;
  o.threads = 2;
  o.quant = quant;
  o.cache_dir = cache.string();
  return std::make_unique<Painter>(image::open_pipeline(dir.string()), o);
}

PaintRequest request() {
  PaintRequest r;
  r.prompt = "a photo of a cat";
  r.negative_prompt = "blurry";
  r.steps = 4;
  r.seed = 42;
  r.scheduler = "euler";
  return r;
}

ino_t inode(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

bool mapped_here(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(path) != std::string::npos) return true;
  return false;
}

}  // namespace

// The q8_0 picture against the f32 one, for both pipelines; the entry is
// written once, then mapped and reused.
TEST(PainterQuant, Q8_0AgainstF32AndCacheReuse) {
  for (const char* name : {"sd15", "sdxl"}) {
    SCOPED_TRACE(name);
    TempDir tmp;
    const fs::path dir = tmp.path / name, cache = tmp.path / "cache";
    fs::copy(pipelines() / name, dir, fs::copy_options::recursive);
    const PaintRequest r = request();
    const PaintResult f32 = load(dir)->paint(r);

    const std::unique_ptr<Painter> q = load(dir, "q8_0", cache);
    ASSERT_TRUE(q->quant_cache().has_value());
    const QuantCacheUse first = *q->quant_cache();
    EXPECT_FALSE(first.hit);
    EXPECT_TRUE(fs::is_regular_file(first.path)) << first.path;
    EXPECT_EQ(fs::path(first.path).parent_path(), cache);
    EXPECT_LT(q->weight_bytes(), load(dir)->weight_bytes());
    const PaintResult a = q->paint(r);
    const double p = psnr8(a.images[0].rgb.data(), f32.images[0].rgb.data(), a.images[0].rgb.size());
    std::printf("%s q8_0 picture vs f32 picture: PSNR %.1f dB (%zu bytes)\n", name, p, a.images[0].rgb.size());
    EXPECT_GE(p, 30) << "q8_0 is too far from f32";
    EXPECT_LT(p, 999) << "q8_0 painted the f32 picture: nothing was quantized";

    // The second load maps the same entry (not rewritten) and paints the same bytes.
    const ino_t ino = inode(first.path);
    const std::unique_ptr<Painter> q2 = load(dir, "q8_0", cache);
    ASSERT_TRUE(q2->quant_cache().has_value());
    EXPECT_TRUE(q2->quant_cache()->hit);
    EXPECT_EQ(q2->quant_cache()->path, first.path);
    EXPECT_EQ(inode(first.path), ino);
    EXPECT_TRUE(mapped_here(first.path));
    EXPECT_TRUE(q2->paint(r).images[0].rgb == a.images[0].rgb);
    size_t entries = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(cache)) entries += e.path().extension() == ".gguf";
    EXPECT_EQ(entries, 1u);

    // A weights file that changed makes the entry stale: written again.
    const fs::path unet = dir / "unet" / "diffusion_pytorch_model.safetensors";
    ASSERT_TRUE(fs::is_regular_file(unet));
    fs::last_write_time(unet, fs::last_write_time(unet) + std::chrono::seconds(5));
    const std::unique_ptr<Painter> q3 = load(dir, "q8_0", cache);
    EXPECT_FALSE(q3->quant_cache()->hit);
  }
}

// What the entry holds: the rule's tensors in q8_0 (convolutions in
// conv2d's layout {C, KW, KH, OC}), the rest as stored.
TEST(PainterQuant, EntryHoldsTheRule) {
  TempDir tmp;
  const image::Pipeline pl = image::open_pipeline((pipelines() / "sd15").string());
  bool hit = true;
  const auto src = image::quantize_pipeline_once(pl, "q8_0", (tmp.path / "cache").string(), &hit);
  EXPECT_FALSE(hit);
  const std::unique_ptr<gguf::File> f = gguf::File::open(image::quantize_pipeline_path(pl, "q8_0", (tmp.path / "cache").string()));
  ASSERT_EQ(f->tensors().size(), pl.weights->tensors().size());
  size_t q8 = 0, conv = 0;
  for (const gguf::TensorInfo& t : f->tensors()) {
    const SourceTensor* s = pl.weights->find(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    const std::vector<int64_t> ne(s->ne.begin(), s->ne.begin() + s->n_dims);
    const bool want = image::quantized_in_pipeline(t.name, ne);
    EXPECT_EQ(t.type == DType::Q8_0, want) << t.name;
    if (!want) {
      EXPECT_EQ(t.type, s->type) << t.name;
      continue;
    }
    ++q8;
    if (s->n_dims == 4) {  // torch ne {KW, KH, C, OC} -> {C, KW, KH, OC}
      ++conv;
      EXPECT_EQ(t.ne, (std::vector<int64_t>{s->ne[2], s->ne[0], s->ne[1], s->ne[3]})) << t.name;
    }
  }
  EXPECT_GT(q8, 50u);
  EXPECT_GT(conv, 20u);
  EXPECT_EQ(f->find_tensor("unet.conv_in.weight")->type, DType::F32);  // 4 latent channels: no whole block
  EXPECT_EQ(f->find_tensor("unet.conv_out.weight")->type, DType::Q8_0);
  EXPECT_EQ(f->find_tensor("unet.down_blocks.0.resnets.0.norm1.weight")->type, DType::F32);
  EXPECT_EQ(f->find_tensor("text_encoder.text_model.embeddings.token_embedding.weight")->type, DType::F32);
  EXPECT_EQ(f->find_tensor("text_encoder.text_model.encoder.layers.0.mlp.fc1.weight")->type, DType::Q8_0);
  EXPECT_EQ(f->find_tensor("text_encoder.text_model.encoder.layers.0.mlp.fc2.weight")->type, DType::F32);  // 37 inputs
  EXPECT_EQ(f->find_tensor("vae.decoder.up_blocks.0.resnets.0.conv1.weight")->type, DType::F32);
  EXPECT_NE(src->find("unet.mid_block.attentions.0.proj_in.weight"), nullptr);
}

// The sim device reads the q8_0 entry as the CPU does.
TEST(PainterQuant, SimEqualsCpu) {
  TempDir tmp;
  const PaintRequest r = request();
  const PaintResult a = load(pipelines() / "sd15", "q8_0", tmp.path)->paint(r);
  const PaintResult b = load(pipelines() / "sd15", "q8_0", tmp.path, "sim")->paint(r);
  EXPECT_TRUE(a.images[0].rgb == b.images[0].rgb);
}

TEST(PainterQuant, BadQuant) {
  TempDir tmp;
  for (const char* bad : {"q4_k", "Q8_0", "f16", "none"}) {
    try {
      load(pipelines() / "sd15", bad, tmp.path);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(bad), std::string::npos) << what;
      EXPECT_NE(what.find("q8_0"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_FALSE(fs::exists(tmp.path / "cache"));
}

// The tiled decode (diffusers' enable_tiling() tiles of the tiny VAE: 8
// latents, overlap 2) on a 128 x 64 picture, against the untiled one.
TEST(PainterTiling, TiledDecode) {
  const std::unique_ptr<Painter> p = load(pipelines() / "sd15");
  EXPECT_EQ(p->vae_tiling().tile, 8);  // sample_size 64 / f 8
  EXPECT_EQ(p->vae_tiling().overlap, 2);
  PaintRequest r = request();
  r.width = 128;
  r.height = 64;
  const PaintResult whole = p->paint(r);  // automatic: 128 x 64 is below kPaintAutoTilePixels
  EXPECT_FALSE(whole.stats.vae_tiled);
  r.vae_tiling = true;
  const PaintResult tiled = p->paint(r);
  EXPECT_TRUE(tiled.stats.vae_tiled);
  const double d = psnr8(tiled.images[0].rgb.data(), whole.images[0].rgb.data(), whole.images[0].rgb.size());
  std::printf("sd15 128x64 tiled decode vs untiled: PSNR %.1f dB\n", d);
  EXPECT_LT(d, 999) << "the tiles were not decoded apart";
  EXPECT_GT(d, 10);
  r.vae_tiling = false;
  EXPECT_TRUE(p->paint(r).images[0].rgb == whole.images[0].rgb);
  // A picture that fits one tile is never tiled (as diffusers decides).
  r.width = 64;
  r.vae_tiling = true;
  EXPECT_FALSE(p->paint(r).stats.vae_tiled);
}
