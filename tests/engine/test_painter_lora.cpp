// Image LoRAs (model/image/lora.h) through the Painter, on the tiny random SD
// 1.5 and SDXL pipelines of tests/fixtures/image_pipelines, against the
// pictures diffusers paints with the same LoRAs (tests/fixtures/image_loras,
// made by tools/make_image_lora_fixtures.py: peft/diffusers' load_lora_weights
// + set_adapters for PEFT, old diffusers and kohya files, kohya's SDXL ldm
// names included; LyCORIS' own LoHa/LoKr deltas for those). Every 8-bit
// picture at PSNR >= 60 dB, while the LoRA itself moves the picture to
// base_db (10-20 dB), so the check can fail. Also: strength 0 is the base
// picture exactly; switching sets and back paints the same pictures and
// leaves the base weights as they were; the broken files of
// tests/fixtures/image_lora_seeds (fuzz_image_lora's corpus) are each
// refused with one line naming what is wrong; A1111's <lora:NAME:SCALE> tags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "psnr.h"
#include "base/error.h"
#include "engine/painter.h"
#include "io/tensor_source.h"
#include "model/image/lora.h"
#include "model/image/pipeline.h"

namespace fs = std::filesystem;
using namespace kvad;
using kvad::test::psnr8;

namespace {

fs::path root() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures"; }
fs::path loras() { return root() / "image_loras"; }

const Painter& painter(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Painter>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return *it->second;
  PainterOptions o;
  o.threads = 2;
  return *cache
              .emplace(name, std::make_unique<Painter>(image::open_pipeline((root() / "image_pipelines" / name).string()), o))
              .first->second;
}

std::shared_ptr<const image::ImageLora> lora(const std::string& pipe, const std::string& file) {
  static std::map<std::string, std::shared_ptr<const image::ImageLora>> cache;
  auto& l = cache[pipe + "/" + file];
  if (!l) l = painter(pipe).load_lora((loras() / file).string());
  return l;
}

PaintRequest request_of(const nlohmann::json& c) {
  PaintRequest r;
  r.prompt = c["prompt"].get<std::string>();
  r.width = c["width"].get<int64_t>();
  r.height = c["height"].get<int64_t>();
  r.steps = c["steps"].get<int64_t>();
  r.cfg = c["cfg"].get<double>();
  r.seed = c["seed"].get<uint64_t>();
  r.scheduler = "euler";
  for (const nlohmann::json& l : c["loras"])
    r.loras.push_back({lora(c["pipeline"].get<std::string>(), l["file"].get<std::string>()), l["strength"].get<float>()});
  return r;
}

nlohmann::json cases() {
  std::ifstream in(loras() / "cases.json");
  return nlohmann::json::parse(in);
}

TEST(PainterLora, EveryCaseMatchesDiffusers) {
  const auto ref = safetensors_source((loras() / "images.safetensors").string());
  const nlohmann::json cs = cases();
  ASSERT_GE(cs.size(), 7u);
  for (const nlohmann::json& c : cs) {
    const std::string key = c["key"].get<std::string>();
    SCOPED_TRACE(key);
    const PaintResult res = painter(c["pipeline"].get<std::string>()).paint(request_of(c));
    const SourceTensor* want = ref->find(key);
    ASSERT_NE(want, nullptr);
    ASSERT_EQ(res.images.size(), 1u);
    ASSERT_EQ(want->n_bytes, res.images[0].rgb.size());
    const double p = psnr8(res.images[0].rgb.data(), static_cast<const uint8_t*>(want->data), res.images[0].rgb.size());
    std::printf("%s: PSNR %.1f dB vs diffusers (the LoRA moves diffusers' picture to %.1f dB)\n", key.c_str(), p,
                c["base_db"].get<double>());
    EXPECT_GE(p, 60.0);
    EXPECT_LT(c["base_db"].get<double>(), 40.0);  // the LoRA changes the picture: the check can fail
  }
}

TEST(PainterLora, SpellingsAndKinds) {
  struct Want {
    const char *pipe, *file, *spelling;
    image::LoraKind kind;
    bool unet, text;
  };
  for (const Want& w : {Want{"sd15", "sd15_peft.safetensors", "PEFT", image::LoraKind::LoRA, true, true},
                        Want{"sd15", "sd15_peft_old.safetensors", "PEFT", image::LoraKind::LoRA, true, true},
                        Want{"sd15", "sd15_kohya.safetensors", "kohya", image::LoraKind::LoRA, true, true},
                        Want{"sdxl", "sdxl_kohya_ldm.safetensors", "kohya + kohya (ldm names)", image::LoraKind::LoRA,
                             true, true},
                        Want{"sd15", "sd15_loha.safetensors", "kohya", image::LoraKind::LoHa, true, false},
                        Want{"sdxl", "sdxl_lokr.safetensors", "kohya", image::LoraKind::LoKr, true, false}}) {
    SCOPED_TRACE(w.file);
    const auto l = lora(w.pipe, w.file);
    EXPECT_EQ(l->spelling, w.spelling);
    EXPECT_EQ(l->touches_unet, w.unet);
    EXPECT_EQ(l->touches_text, w.text);
    ASSERT_FALSE(l->modules.empty());
    for (const image::LoraModule& m : l->modules) EXPECT_EQ(static_cast<int>(m.kind), static_cast<int>(w.kind)) << m.target;
  }
  // LoCon: the kohya files adapt 3×3 convolutions too
  bool conv = false;
  for (const image::LoraModule& m : lora("sd15", "sd15_kohya.safetensors")->modules)
    conv |= m.target.ends_with("conv1.weight") && m.f[1].shape.size() == 4 && m.f[1].shape[2] == 3;
  EXPECT_TRUE(conv);
}

// Strength 0 is the base; a set, another, then the first again paint the same; the base is untouched.
TEST(PainterLora, SwitchingSetsKeepsTheBase) {
  const Painter& p = painter("sd15");
  PaintRequest r;
  r.prompt = "a photo of a cat";
  r.steps = 2;
  r.seed = 3;
  const PaintResult base = p.paint(r);
  r.loras = {{lora("sd15", "sd15_peft.safetensors"), 0.0f}};
  EXPECT_TRUE(p.paint(r).images[0].rgb == base.images[0].rgb);
  r.loras = {{lora("sd15", "sd15_peft.safetensors"), 1.0f}};
  const PaintResult a = p.paint(r);
  EXPECT_FALSE(a.images[0].rgb == base.images[0].rgb);
  r.loras = {{lora("sd15", "sd15_loha.safetensors"), 1.0f}};
  const PaintResult b = p.paint(r);
  EXPECT_FALSE(b.images[0].rgb == a.images[0].rgb);
  r.loras = {{lora("sd15", "sd15_peft.safetensors"), 1.0f}};
  EXPECT_TRUE(p.paint(r).images[0].rgb == a.images[0].rgb);
  r.loras.clear();
  EXPECT_TRUE(p.paint(r).images[0].rgb == base.images[0].rgb);
  r.loras = {{lora("sd15", "sd15_peft.safetensors"), NAN}};
  EXPECT_THROW(p.paint(r), Error);
}

TEST(PainterLora, BrokenFilesAreOneLineErrors) {
  const fs::path dir = root() / "image_lora_seeds";
  std::ifstream in(dir / "expect.json");
  const nlohmann::json expect = nlohmann::json::parse(in);
  ASSERT_GE(expect.size(), 15u);
  for (const auto& [file, want] : expect.items()) {
    SCOPED_TRACE(file);
    try {
      (void)painter("sd15").load_lora((dir / file).string());
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::printf("%s: %s\n", file.c_str(), msg.c_str());
      EXPECT_NE(msg.find(want.get<std::string>()), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // every seed of the corpus is listed
  size_t n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) n += e.path().extension() == ".safetensors";
  EXPECT_EQ(n, expect.size());
}

TEST(PainterLora, AllowPartialSkipsWithAWarning) {
  image::LoraLoadOptions o;
  o.allow_partial = true;
  const auto l = painter("sd15").load_lora((root() / "image_lora_seeds" / "misspelled.safetensors").string(), o);
  ASSERT_EQ(l->modules.size(), 1u);
  EXPECT_EQ(l->modules[0].target, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight");
}

TEST(PainterLora, PromptTags) {
  auto [prompt, tags] = image::extract_lora_tags("a cat <lora:style:0.8>, <lora:speed> in <b>snow</b> <lora:x:-1.5e0>");
  EXPECT_EQ(prompt, "a cat ,  in <b>snow</b> ");
  ASSERT_EQ(tags.size(), 3u);
  EXPECT_EQ(tags[0].name, "style");
  EXPECT_FLOAT_EQ(tags[0].strength, 0.8f);
  EXPECT_EQ(tags[1].name, "speed");
  EXPECT_FLOAT_EQ(tags[1].strength, 1.0f);
  EXPECT_FLOAT_EQ(tags[2].strength, -1.5f);
  EXPECT_EQ(image::extract_lora_tags("no tags <lora:open").first, "no tags <lora:open");
  EXPECT_THROW(image::extract_lora_tags("<lora::1>"), Error);
  EXPECT_THROW(image::extract_lora_tags("<lora:a:nan>"), Error);
  EXPECT_THROW(image::extract_lora_tags("<lora:a:0.5x>"), Error);
  EXPECT_EQ(image::resolve_lora_name(loras().string(), "sd15_peft"), (loras() / "sd15_peft.safetensors").string());
  EXPECT_THROW(image::resolve_lora_name(loras().string(), "missing"), Error);
  EXPECT_THROW(image::resolve_lora_name(loras().string(), "../image_loras/sd15_peft"), Error);
  EXPECT_EQ(image::parse_image_lora_arg("a/b.safetensors:0.5"), (std::pair<std::string, float>{"a/b.safetensors", 0.5f}));
  EXPECT_EQ(image::parse_image_lora_arg("a/b.safetensors@2"), (std::pair<std::string, float>{"a/b.safetensors", 2.0f}));
  EXPECT_EQ(image::parse_image_lora_arg("c:/x.safetensors"), (std::pair<std::string, float>{"c:/x.safetensors", 1.0f}));
  EXPECT_EQ(image::list_lora_names(loras().string()),
            (std::vector<std::string>{"images", "sd15_kohya", "sd15_loha", "sd15_peft", "sd15_peft_old",
                                      "sdxl_kohya_ldm", "sdxl_lokr"}));
  EXPECT_TRUE(image::list_lora_names((loras() / "none").string()).empty());
  const std::string f = (loras() / "sd15_peft.safetensors").string();
  EXPECT_EQ(painter("sd15").cached_lora(f), painter("sd15").cached_lora(f));
  EXPECT_THROW(image::parse_image_lora_arg("a.safetensors:nan"), Error);
  EXPECT_THROW(image::parse_image_lora_arg("a.safetensors@x"), Error);
}

}  // namespace
