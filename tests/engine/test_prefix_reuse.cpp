// Prefix reuse across chat turns: turn N evaluates only the tokens past the
// longest common prefix with what the session holds, and its logits equal
// those of a fresh prefill of the same full conversation.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "model/registry.h"
#include "model_path.h"
#include "engine/chat_prompt.h"
#include "tokenizer/tokenizer.h"

using json = nlohmann::ordered_json;

TEST(PrefixReuse, ThirdTurnLogitsEqualFreshPrefill) {
  const std::string path = kvad::test::find_model("smollm2-135m");
  if (path.empty()) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  std::shared_ptr<const kvad::gguf::File> f = kvad::gguf::File::open(path);
  std::shared_ptr<kvad::Model> model = kvad::load_model(f);
  auto tok = kvad::Tokenizer::from_gguf(*f);
  const kvad::ChatPrompt chat = kvad::ChatPrompt::from_gguf(*f, *tok);

  kvad::Session s(model, 1024, 1, 2);
  kvad::SamplerParams sp;
  sp.temp = 0;
  kvad::Sampler sampler(sp);
  std::vector<int32_t> held;
  json messages = json::array();
  const char* users[] = {"Name a fruit.", "What color is it?", "Thanks! Say it again."};
  std::vector<int32_t> last_prompt, held_before_last;
  int32_t prev_held = 0;
  for (int turn = 0; turn < 3; ++turn) {
    messages.push_back({{"role", "user"}, {"content", users[turn]}});
    held_before_last = held;
    const auto ids = chat.tokenize(messages, true);
    kvad::GenerateOptions go;
    go.max_tokens = turn == 2 ? 1 : 12;
    go.held = &held;
    std::string reply;
    const auto st = kvad::generate(s, *tok, sampler, ids, go, [&](const std::string& p) {
      reply += p;
      return true;
    });
    EXPECT_EQ(st.n_cached + st.n_prompt, static_cast<int32_t>(ids.size()));
    if (turn == 0) {
      EXPECT_EQ(st.n_cached, 0);
    } else {
      // The previous turn's prompt and most of its reply are reused.
      EXPECT_GT(st.n_cached, prev_held - 4) << "turn " << turn;
      EXPECT_LT(st.n_prompt, static_cast<int32_t>(ids.size()) / 2) << "turn " << turn;
    }
    EXPECT_EQ(static_cast<int32_t>(held.size()), s.cached(0));
    prev_held = static_cast<int32_t>(held.size());
    messages.push_back({{"role", "assistant"}, {"content", reply}});
    last_prompt = ids;
  }

  // Logits at the end of turn 3's prompt, with the reused prefix...
  kvad::Session a(model, 1024, 1, 2);
  std::vector<int32_t> held_a;
  std::vector<float> reused;
  {
    // Rebuild the same cache history: the two earlier turns' tokens, then
    // only turn 3's new tokens.
    const size_t keep = std::min(kvad::common_prefix(held_before_last, last_prompt), last_prompt.size() - 1);
    ASSERT_GT(keep, 0u);
    std::vector<int32_t> prefix(last_prompt.begin(), last_prompt.begin() + keep);
    kvad::prefill(a, prefix, 0, 512);
    std::vector<int32_t> rest(last_prompt.begin() + keep, last_prompt.end());
    reused = kvad::prefill(a, rest, 0, 512);
  }
  // ...and from a fresh prefill of the whole conversation.
  kvad::Session b(model, 1024, 1, 2);
  const std::vector<float> fresh = kvad::prefill(b, last_prompt, 0, 512);
  ASSERT_EQ(reused.size(), fresh.size());
  double worst = 0;
  for (size_t i = 0; i < fresh.size(); ++i) worst = std::max(worst, std::fabs(double(reused[i]) - fresh[i]));
  // Same tokens, same positions: each row's math is identical whichever
  // batch it was evaluated in, so the logits agree to float rounding.
  EXPECT_LE(worst, 1e-3);
  std::printf("max |logit diff| reused prefix vs fresh prefill: %.2e\n", worst);
}
