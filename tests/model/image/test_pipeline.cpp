// The pipeline reader (model/image/pipeline.h) on the tiny random SD 1.5 and
// SDXL pipelines of tests/fixtures/image_pipelines (tools/make_image_pipelines.py):
// the diffusers folders, and the single files in the original layout that
// diffusers' own conversion scripts made from them, which must give every
// tensor of the folder under its diffusers name with the same bytes (the
// scripts' mapping is the reference for the name table). Bad input: one-line
// kvad::Errors naming what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "image_fixtures.h"
#include "base/error.h"
#include "io/tensor_source.h"
#include "model/image/pipeline.h"
#include "model/weights.h"

namespace fs = std::filesystem;
using namespace kvad;
using namespace kvad::image;
using kvad::image_test::fixtures;

namespace {

// A scratch copy of a fixture pipeline folder, removed at the end.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name) {
    dir = fs::temp_directory_path() / ("kvad_test_pipeline_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir);
    fs::copy(fixtures() / name, dir, fs::copy_options::recursive);
  }
  ~Scratch() { fs::remove_all(dir); }
};

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// The error's message, which must be one line naming `want`.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
#define EXPECT_ERROR(expr, want)                                             \
  do {                                                                       \
    const std::string msg = error_of([&] { (void)(expr); });                 \
    EXPECT_NE(msg.find(want), std::string::npos) << msg;                     \
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg; \
  } while (0)

// The same tensors, names, shapes, formats and bytes.
void expect_same_weights(const TensorSource& a, const TensorSource& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const SourceTensor& t : a.tensors()) {
    const SourceTensor* u = b.find(t.name);
    ASSERT_NE(u, nullptr) << t.name << " is missing from " << b.path();
    EXPECT_EQ(t.shape, u->shape) << t.name;
    EXPECT_EQ(t.type, u->type) << t.name;
    ASSERT_EQ(t.n_bytes, u->n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u->data, t.n_bytes), 0) << t.name << " differs";
  }
}

}  // namespace

TEST(ImagePipeline, Sd15Folder) {
  const Pipeline p = open_pipeline((fixtures() / "sd15").string());
  EXPECT_EQ(p.pipeline_class, PipelineClass::StableDiffusion);
  EXPECT_FALSE(p.single_file);
  EXPECT_FALSE(p.force_zeros_for_empty_prompt);
  EXPECT_EQ(p.unet.block_out_channels, (std::vector<int64_t>{32, 32, 32, 32}));
  EXPECT_EQ(p.unet.num_attention_heads, (std::vector<int64_t>{4, 4, 4, 4}));  // attention_head_dim 4
  EXPECT_FALSE(p.unet.use_linear_projection);
  EXPECT_EQ(p.unet.cross_attention_dim, 32);
  EXPECT_EQ(p.vae.block_out_channels.size(), 4u);
  EXPECT_DOUBLE_EQ(p.vae.scaling_factor, 0.18215);
  EXPECT_EQ(p.text_encoder.hidden_act, "quick_gelu");
  EXPECT_EQ(p.text_encoder.eos_token_id, 2);
  EXPECT_FALSE(p.text_encoder_2);
  EXPECT_TRUE(fs::exists(fs::path(p.tokenizer) / "vocab.json"));
  EXPECT_NE(p.scheduler_config.find("PNDMScheduler"), std::string::npos);
  EXPECT_NE(p.weights->find("unet.conv_in.weight"), nullptr);
  EXPECT_NE(p.weights->find("vae.decoder.mid_block.attentions.0.to_q.weight"), nullptr);
  EXPECT_NE(p.weights->find("text_encoder.text_model.final_layer_norm.weight"), nullptr);
}

TEST(ImagePipeline, SdxlFolder) {
  const Pipeline p = open_pipeline((fixtures() / "sdxl").string());
  EXPECT_EQ(p.pipeline_class, PipelineClass::StableDiffusionXL);
  EXPECT_TRUE(p.force_zeros_for_empty_prompt);
  EXPECT_TRUE(p.unet.use_linear_projection);
  EXPECT_EQ(p.unet.addition_embed_type, "text_time");
  EXPECT_EQ(p.unet.transformer_layers_per_block, (std::vector<int64_t>{1, 1, 2}));
  ASSERT_TRUE(p.text_encoder_2);
  EXPECT_TRUE(p.text_encoder_2->with_projection);
  EXPECT_EQ(p.text_encoder_2->hidden_act, "gelu");
  EXPECT_TRUE(fs::exists(fs::path(p.tokenizer_2) / "merges.txt"));
  EXPECT_NE(p.weights->find("text_encoder_2.text_projection.weight"), nullptr);
  EXPECT_NE(p.weights->find("unet.add_embedding.linear_1.weight"), nullptr);
}

// The single files diffusers' scripts wrote hold the folders' tensors: read
// through the name table, every one is there under its diffusers name, bytes equal.
TEST(ImagePipeline, SingleFileEqualsFolder) {
  for (const char* name : {"sd15", "sdxl"}) {
    SCOPED_TRACE(name);
    const Pipeline folder = open_pipeline((fixtures() / name).string());
    PipelineOptions o;
    o.config = (fixtures() / name).string();
    const Pipeline single = open_pipeline((fixtures() / (std::string(name) + ".safetensors")).string(), o);
    EXPECT_TRUE(single.single_file);
    ASSERT_TRUE(single.layout);
    EXPECT_EQ(*single.layout, std::string(name) == "sd15" ? LdmLayout::SD15 : LdmLayout::SDXL);
    EXPECT_EQ(single.pipeline_class, folder.pipeline_class);
    EXPECT_EQ(single.tokenizer, (fixtures() / name / "tokenizer").string());
    expect_same_weights(*folder.weights, *single.weights);
  }
}

// Every tensor must be taken: a loader over the pipeline names the ones left.
TEST(ImagePipeline, UnreadTensorsAreAnError) {
  const Pipeline p = open_pipeline((fixtures() / "sd15").string());
  WeightLoader wl(p.weights, DeviceOptions{});
  (void)wl.get("unet.conv_in.weight", {3, 3, 4, 32});
  EXPECT_ERROR(wl.finish(), "not used by architecture");
}

// diffusers' variant files: NAME.fp16.safetensors is taken when asked for,
// and when it is the only file; two plain files are ambiguous.
TEST(ImagePipeline, Variants) {
  Scratch s("sd15");
  const fs::path unet = s.dir / "unet";
  fs::copy_file(unet / "diffusion_pytorch_model.safetensors", unet / "diffusion_pytorch_model.fp16.safetensors");
  PipelineOptions fp16;
  fp16.variant = "fp16";
  EXPECT_NE(open_pipeline(s.dir.string(), fp16).weights->find("unet.conv_in.weight")->origin.find(".fp16."),
            std::string::npos);
  EXPECT_EQ(open_pipeline(s.dir.string()).weights->find("unet.conv_in.weight")->origin.find(".fp16."),
            std::string::npos);
  fs::remove(unet / "diffusion_pytorch_model.safetensors");
  EXPECT_NE(open_pipeline(s.dir.string()).weights->find("unet.conv_in.weight")->origin.find(".fp16."),
            std::string::npos);
  fs::copy_file(unet / "diffusion_pytorch_model.fp16.safetensors", unet / "a.safetensors");
  fs::copy_file(unet / "diffusion_pytorch_model.fp16.safetensors", unet / "b.safetensors");
  EXPECT_ERROR(open_pipeline(s.dir.string()), "several weights files");
}

TEST(ImagePipeline, BadFolders) {
  Scratch s("sdxl");
  const std::string dir = s.dir.string();
  const std::string index = (s.dir / "model_index.json").string();
  std::string text;
  {
    std::ifstream in(index);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  write(index, "{\"_class_name\": \"StableDiffusionXLPipeline\",");
  EXPECT_ERROR(open_pipeline(dir), "model_index.json: invalid JSON");
  write(index, "[1, 2]");
  EXPECT_ERROR(open_pipeline(dir), "model_index.json: not a JSON object");
  write(index, "{\"_class_name\": \"QwenImagePipeline\"}");
  EXPECT_ERROR(open_pipeline(dir), "'QwenImagePipeline' is not a pipeline kvad runs");
  write(index, "{\"_class_name\": \"FluxPipeline\"}");
  EXPECT_ERROR(open_pipeline(dir), "no component transformer");
  write(index, "{\"_class_name\": \"StableDiffusionXLPipeline\", \"unet\": [\"diffusers\", \"UNet2DConditionModel\"]}");
  EXPECT_ERROR(open_pipeline(dir), "no component vae");
  write(index, text);
  fs::remove_all(s.dir / "text_encoder_2");
  EXPECT_ERROR(open_pipeline(dir), "component text_encoder_2 of model_index.json has no folder text_encoder_2/");
  EXPECT_ERROR(open_pipeline((fs::path(dir) / "nothing").string()), "no such file or folder");
  EXPECT_ERROR(open_pipeline((s.dir / "unet").string()), "no model_index.json");
}

TEST(ImagePipeline, BadConfigs) {
  Scratch s("sd15");
  const fs::path cfg = s.dir / "unet" / "config.json";
  std::string text;
  {
    std::ifstream in(cfg);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    write(cfg, t.replace(at, from.size(), to));
  };
  with("\"norm_num_groups\": 32", "\"norm_num_groups\": 24");
  EXPECT_ERROR(open_pipeline(s.dir.string()), "block_out_channels 32 is not a multiple of norm_num_groups 24");
  with("\"cross_attention_dim\": 32", "\"cross_attention_dim\": 48");
  EXPECT_ERROR(open_pipeline(s.dir.string()), "cross_attention_dim 48 is not the text encoder's hidden_size 32");
  with("\"in_channels\": 4", "\"in_channels\": 9");
  EXPECT_ERROR(open_pipeline(s.dir.string()), "has shape [32, 4, 3, 3], the config gives [32, 9, 3, 3]");
  with("\"layers_per_block\": 2", "\"layers_per_block\": \"two\"");
  EXPECT_ERROR(open_pipeline(s.dir.string()), "layers_per_block is not an integer");
}

// A single file against configs it does not match: kvad's SD 1.5 base
// configs (the tiny UNet is not SD 1.5's size), a UNet config with fewer
// resnets than the file has (its tensors are no component's).
TEST(ImagePipeline, SingleFileShapesAgainstConfig) {
  EXPECT_ERROR(open_pipeline((fixtures() / "sd15.safetensors").string()),
               "unet.conv_in.weight (model.diffusion_model.input_blocks.0.0.weight) has shape [32, 4, 3, 3], the "
               "config gives [320, 4, 3, 3]");
  EXPECT_ERROR(open_pipeline((fixtures() / "sdxl.safetensors").string()), "the config gives [320, 4, 3, 3]");
  Scratch s("sd15");
  const fs::path cfg = s.dir / "unet" / "config.json";
  std::string text;
  {
    std::ifstream in(cfg);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  write(cfg, text.replace(text.find("\"layers_per_block\": 2"), 21, "\"layers_per_block\": 1"));
  PipelineOptions o;
  o.config = s.dir.string();
  EXPECT_ERROR(open_pipeline((fixtures() / "sd15.safetensors").string(), o), "is not part of the SD 1.5 pipeline");
  o.config = (fixtures() / "sdxl").string();
  EXPECT_ERROR(open_pipeline((fixtures() / "sd15.safetensors").string(), o), "is a StableDiffusionXLPipeline");
}

TEST(ImagePipeline, SingleFileOfUnknownLayout) {
  const fs::path tiny = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny";
  fs::path any;
  for (const auto& e : fs::recursive_directory_iterator(tiny))
    if (e.path().filename() == "model.safetensors") {
      any = e.path();
      break;
    }
  ASSERT_FALSE(any.empty());
  EXPECT_ERROR(open_pipeline(any.string()), "not a Stable Diffusion checkpoint kvad knows");
}

// The file's own VAE gives way to one asked for; a file without one needs one.
TEST(ImagePipeline, SingleFileWithAnotherVae) {
  PipelineOptions o;
  o.config = (fixtures() / "sd15").string();
  o.vae = (fixtures() / "sdxl" / "vae").string();
  const Pipeline p = open_pipeline((fixtures() / "sd15.safetensors").string(), o);
  EXPECT_DOUBLE_EQ(p.vae.scaling_factor, 0.13025);
  size_t n_vae = 0;
  for (const SourceTensor& t : p.weights->tensors())
    if (t.name.starts_with("vae.")) {
      ++n_vae;
      EXPECT_NE(t.origin.find("sdxl"), std::string::npos) << t.name << " from " << t.origin;
    }
  EXPECT_EQ(n_vae,
            open_pipeline((fixtures() / "sdxl").string()).vae.block_out_channels.size() > 0
                ? safetensors_source((fixtures() / "sdxl" / "vae" / "diffusion_pytorch_model.safetensors").string())
                      ->tensors()
                      .size()
                : 0);
}

// A VAE saved before diffusers 0.14 names its mid-block attention
// query/key/value/proj_attn; it is read as to_q/to_k/to_v/to_out.0.
TEST(ImagePipeline, OldVaeAttentionNames) {
  Scratch s("sd15");
  const fs::path f = s.dir / "vae" / "diffusion_pytorch_model.safetensors";
  std::string bytes;
  {
    std::ifstream in(f, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::ordered_json h = nlohmann::ordered_json::parse(bytes.substr(8, n)), old = nlohmann::ordered_json::object();
  int renamed = 0;
  for (auto& [k, v] : h.items()) {
    std::string name = k;
    for (auto [now, was] :
         {std::pair{"to_q.", "query."}, {"to_k.", "key."}, {"to_v.", "value."}, {"to_out.0.", "proj_attn."}})
      if (const size_t at = name.find(std::string("attentions.0.") + now); at != std::string::npos)
        name.replace(at + 13, std::strlen(now), was), ++renamed;
    old[name] = v;
  }
  EXPECT_EQ(renamed, 16);  // encoder and decoder: q, k, v, out, weight and bias
  std::string head = old.dump();
  while (head.size() % 8) head += ' ';
  const uint64_t m = head.size();  // data offsets count from the data's start: unchanged
  write(f, std::string(reinterpret_cast<const char*>(&m), 8) + head + bytes.substr(8 + n));
  const Pipeline p = open_pipeline(s.dir.string());
  const SourceTensor* q = p.weights->find("vae.decoder.mid_block.attentions.0.to_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_NE(p.weights->tensor_name("vae.decoder.mid_block.attentions.0.to_q.weight").find("query.weight"),
            std::string::npos);
  EXPECT_EQ(p.weights->find("vae.decoder.mid_block.attentions.0.query.weight"), nullptr);
}
