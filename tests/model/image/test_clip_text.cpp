// CLIP text encoders (model/image/clip_text.h) on the tiny random SD 1.5 and
// SDXL pipelines against transformers' CLIPTextModel /
// CLIPTextModelWithProjection and diffusers' encode_prompt, in f32
// (tests/fixtures/image_pipelines/text_encoders.safetensors, made by
// tools/make_image_pipelines.py): the token ids equal, every hidden state and
// pooled embedding at PSNR >= 100 dB, from the folder and from the single file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "image_fixtures.h"
#include "psnr.h"
#include "base/error.h"
#include "io/tensor_source.h"
#include "model/image/clip_text.h"
#include "model/image/pipeline.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace fs = std::filesystem;
using namespace kvad;
using namespace kvad::image;
using kvad::image_test::fixtures;
using kvad::image_test::floats;
using kvad::image_test::host;
using kvad::image_test::ints;
using kvad::test::psnr;

namespace {

const std::vector<std::string> kPrompts = {"a photo of a cat", "", "A Red FOX in fresh snow, 8k, (masterpiece:1.2)"};


class ClipText : public ::testing::Test {
 protected:
  std::shared_ptr<const TensorSource> ref_ = safetensors_source((fixtures() / "text_encoders.safetensors").string());
  const SourceTensor& ref(const std::string& name) {
    const SourceTensor* t = ref_->find(name);
    if (!t) throw Error("no reference tensor " + name);
    return *t;
  }
  void check(const std::string& kind, const std::string& folder, const std::string& single) {
    for (bool from_single : {false, true}) {
      SCOPED_TRACE(from_single ? single : folder);
      PipelineOptions o;
      if (from_single) o.config = (fixtures() / folder).string();
      const Pipeline pl = open_pipeline((fixtures() / (from_single ? single : folder)).string(), o);
      WeightLoader wl(pl.weights, DeviceOptions{});
      const PromptEncoder enc(pl, wl);
      for (size_t i = 0; i < kPrompts.size(); ++i) {
        SCOPED_TRACE(kPrompts[i]);
        const std::string s = std::to_string(i);
        EXPECT_EQ(enc.tokenizer(0).encode_padded(kPrompts[i]), ints(ref(kind + ".ids." + s)));
        if (kind == "sdxl") {
          EXPECT_EQ(enc.tokenizer(1).encode_padded(kPrompts[i]), ints(ref(kind + ".ids_2." + s)));
        }
        const PromptEmbeds e = enc.encode(kPrompts[i]);
        const double p = psnr(host(e.hidden), floats(ref(kind + ".hidden." + s)));
        EXPECT_GE(p, 100) << "hidden";
        std::printf("%s %s prompt %zu: hidden PSNR %.1f dB", kind.c_str(), from_single ? "file" : "folder", i, p);
        if (kind == "sdxl") {
          const double q = psnr(host(e.pooled), floats(ref(kind + ".pooled." + s)));
          EXPECT_GE(q, 100) << "pooled";
          std::printf(", pooled %.1f dB", q);
        }
        std::printf("\n");
      }
      if (kind == "sdxl") {
        const PromptEmbeds zero = enc.negative(std::nullopt);  // force_zeros_for_empty_prompt
        EXPECT_EQ(psnr(host(zero.hidden), floats(ref("sdxl.neg_hidden"))), 999);
        EXPECT_EQ(psnr(host(zero.pooled), floats(ref("sdxl.neg_pooled"))), 999);
        const PromptEmbeds empty = enc.negative(std::string());
        EXPECT_GE(psnr(host(empty.hidden), floats(ref("sdxl.neg_empty_hidden"))), 100);
        EXPECT_GE(psnr(host(empty.pooled), floats(ref("sdxl.neg_empty_pooled"))), 100);
      }
      // The text encoders' tensors are all read; the UNet's and VAE's are left.
      std::string left;
      try {
        wl.finish();
      } catch (const Error& e) {
        left = e.what();
      }
      EXPECT_EQ(left.find("text_encoder"), std::string::npos) << left;
    }
  }
};

}  // namespace

TEST_F(ClipText, Sd15LastHiddenState) { check("sd15", "sd15", "sd15.safetensors"); }

TEST_F(ClipText, SdxlPenultimateAndPooled) { check("sdxl", "sdxl", "sdxl.safetensors"); }

TEST_F(ClipText, BadIds) {
  const Pipeline pl = open_pipeline((fixtures() / "sd15").string());
  WeightLoader wl(pl.weights, DeviceOptions{});
  const ClipTextEncoder enc(wl.root().sub("text_encoder"), pl.text_encoder);
  const std::vector<int32_t> big(78, 0), bad = {0, 5000};
  EXPECT_THROW(enc.encode(big, ClipTextEncoder::Layer::Last, false), Error);
  EXPECT_THROW(enc.encode(bad, ClipTextEncoder::Layer::Last, false), Error);
  EXPECT_THROW(enc.encode({}, ClipTextEncoder::Layer::Last, false), Error);
}
