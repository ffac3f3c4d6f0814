// Drives the real `kvad` binary as a user would and checks output and errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model_path.h"
#include "run_kvad.h"

namespace {

using kvad::test::Out;
using kvad::test::run_kvad;
using kvad::test::one_error_line;

const std::string kPeer = std::string(KVAD_PEER_DATA) + "/tokenizer";

// An HF checkpoint directory with tokenizer.json and no tokenizer_config.json
// (optional in transformers) runs: raw, and without --raw as a model with no
// chat template (completed as is, said on stderr). The tiny qwen2 fixture's weights; a byte-level BPE of 128
// single characters, no merges.
TEST(Cli, CheckpointWithoutTokenizerConfigRuns) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvad-cli-notokcfg-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path src = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny" / "qwen2";
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dir / f);
  std::string vocab;
  for (int c = 0; c < 128; ++c) {
    const int cp = c >= 33 && c <= 126 ? c : 0x100 + (c < 33 ? c : c - 94);  // GPT-2's byte-to-unicode map
    std::string ch = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                               : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    if (ch == "\"" || ch == "\\") ch = "\\" + ch;
    vocab += (c ? ", \"" : "\"") + ch + "\": " + std::to_string(c);
  }
  std::ofstream(dir / "tokenizer.json")
      << R"({"version": "1.0", "added_tokens": [], "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false, "ignore_merges": false,
            "vocab": {)" << vocab << R"(}, "merges": []}})";
  Out r = run_kvad("run --model " + dir.string() + " --prompt abc -n 4 --temp 0 --raw -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
  // Without --raw: no chat template, so the prompt is completed as is, said once.
  Out c = run_kvad("run --model " + dir.string() + " --prompt abc -n 4 --temp 0 -t 1");
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("has no chat template; completing the prompt as is"), std::string::npos) << c.err;
  EXPECT_EQ(c.out, r.out);
  fs::remove_all(dir);
}


}  // namespace

TEST(Cli, MissingModelFileIsOneLineError) {
  Out r = run_kvad("run --model /nonexistent/model.gguf --prompt hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
}

TEST(Cli, NotAGgufIsOneLineError) {
  const std::string p = ::testing::TempDir() + "/not_a_model.gguf";
  std::ofstream(p) << "this is not a gguf file at all";
  Out r = run_kvad("run --model " + p + " --prompt hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("magic"), std::string::npos) << r.err;
}

TEST(Cli, UnsupportedArchitectureNamesSupportedOnes) {
  // A real vocab-only GGUF whose general.architecture (starcoder) kvad does not run.
  Out r = run_kvad("run --model " + kPeer + "/ggml-vocab-starcoder.gguf --prompt hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("not supported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("qwen3moe"), std::string::npos) << r.err;  // every architecture of the registry
  EXPECT_NE(r.err.find("gpt2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("phi3"), std::string::npos) << r.err;
}

TEST(Cli, DeviceCudaWithoutGpuIsOneLineError) {
  // Without CUDA in the build, or without a GPU, --device cuda says which
  // before touching the model; on a GPU machine the missing file is the error.
  for (const char* sub : {"run --prompt hi", "bench", "chat"}) {
    Out r = run_kvad(std::string(sub) + " --device cuda --model /nonexistent/model.gguf", "hi\n");
    EXPECT_EQ(r.status, 1) << sub;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    const bool said = r.err.find("kvad was built without CUDA") != std::string::npos ||
                      r.err.find("no CUDA device") != std::string::npos ||
                      r.err.find("/nonexistent/model.gguf") != std::string::npos;
    EXPECT_TRUE(said) << r.err;
  }
}

TEST(Cli, TokenizeVocabOnlyFile) {
  Out r = run_kvad("tokenize --model " + kPeer + "/ggml-vocab-gpt-2.gguf", "Hello world");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995\n");
  Out d = run_kvad("tokenize --detokenize --model " + kPeer + "/ggml-vocab-gpt-2.gguf", "15496 995");
  EXPECT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(d.out.substr(0, 11), "Hello world");
}

class CliWithModel : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = kvad::test::find_model("smollm2-135m");
    if (model_.empty()) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  }
  std::string model_;
};

TEST_F(CliWithModel, CapitalOfFranceIsParis) {
  Out r = run_kvad("run --model " + model_ + " --prompt \"The capital of France is\" -n 8 --temp 0 --raw -t 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("decode"), std::string::npos) << r.err;  // the stats line
  EXPECT_NE(r.err.find("peak RSS"), std::string::npos) << r.err;
}

TEST_F(CliWithModel, DefaultModelFromStoreAnswersChatPrompt) {
  // No --model: the store's default; the prompt goes through the chat template.
  // The bare "What is the capital of France?" is a near-tie at the first
  // token for this model (llama.cpp's greedy answer is "L'Étoile, la
  // Marseillaise, ..."); with "Answer with one word." llama.cpp, kvad's AVX2
  // and scalar kernels all answer "The capital of France is Paris."
  Out r = run_kvad("run --prompt \"What is the capital of France? Answer with one word.\" -n 24 --temp 0 -t 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
  // stderr names the model it took; with --model it does not.
  EXPECT_NE(r.err.find("[kvad] model smollm2-135m (the default"), std::string::npos) << r.err;
  Out named = run_kvad("run --model " + model_ + " --prompt hi -n 1 -t 2");
  EXPECT_EQ(named.err.find("(the default"), std::string::npos) << named.err;
}

TEST_F(CliWithModel, SameSeedSameText) {
  const std::string args = "run --model " + model_ + " --prompt \"Tell me a story\" -n 16 --temp 1.0 --seed 7 -t 2";
  Out a = run_kvad(args), b = run_kvad(args);
  EXPECT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST_F(CliWithModel, PromptLongerThanContextIsOneLineError) {
  Out r = run_kvad("run --model " + model_ + " --raw --ctx-size 8 --prompt \"one two three four five six seven eight nine ten\"");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
}

TEST_F(CliWithModel, BenchJsonHasLlamaBenchFields) {
  Out r = run_kvad("bench --model " + model_ + " -p 16 -n 4 -r 2 -t 2 --json");
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* f : {"\"model_filename\"", "\"n_prompt\"", "\"n_gen\"", "\"n_threads\"", "\"avg_ts\"",
                        "\"stddev_ts\""})
    EXPECT_NE(r.out.find(f), std::string::npos) << f;
}

// Three turns over stdin: each turn after the first reuses the cached prefix,
// so cached_tokens grows turn by turn and only the new tokens are prefilled.
TEST_F(CliWithModel, ChatThreeTurnsReuseTheCachedPrefix) {
  Out r = run_kvad("chat --model " + model_ + " --temp 0 -n 24 -t 2",
                   "What is the capital of France? Answer with one word.\n"
                   "And of Germany? Answer with one word.\n/stats\nThank you!\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Berlin"), std::string::npos) << r.out;
  std::vector<int> cached;
  size_t at = 0;
  while ((at = r.err.find("cached_tokens ", at)) != std::string::npos) {
    at += 14;
    cached.push_back(std::stoi(r.err.substr(at)));
  }
  ASSERT_EQ(cached.size(), 4u) << r.err;  // three turns + /stats
  EXPECT_EQ(cached[0], 0);
  EXPECT_GT(cached[1], 30);          // the whole first exchange
  EXPECT_EQ(cached[2], cached[1]);   // /stats repeats the last turn
  EXPECT_GT(cached[3], cached[1]);   // and the third turn reuses more still
}

// `kvad template` prints the rendered prompt exactly (no newline added). The
// engine itself is checked against Python's jinja2 in test_chat_template;
// this checks the command's plumbing and its errors.
TEST(Cli, TemplateRendersPeerTemplateLikeJinja2) {
  const std::string tmpl = std::string(KVAD_PEER_DATA) + "/templates/google-gemma-2-2b-it.jinja";
  Out r = run_kvad("template --template " + tmpl + " --bos '<bos>' --add-generation-prompt",
                   R"([{"role": "user", "content": "Hi there"}])");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n");
  Out bad = run_kvad("template --template " + tmpl, "{not json");
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(one_error_line(bad.err)) << bad.err;
}

// --cache-type-k/-ctk and --cache-type-v/-ctv (llama.cpp's flags): a value
// other than f16 or f32 is one error line naming the flag and the accepted
// values, before any model is read, on every command that makes a cache,
// with the usage-error status 2 as every other bad flag value.
TEST(Cli, CacheTypeOtherThanF16OrF32IsOneLineError) {
  for (const char* sub : {"run --prompt hi", "chat", "bench", "perplexity -f /dev/null", "serve"}) {
    for (const char* flag : {"--cache-type-k q8_0", "-ctv q4_0", "--cache-type-k q9", "-ctk q9"}) {
      Out r = run_kvad(std::string(sub) + " " + flag + " --model /nonexistent/model.gguf", "hi\n");
      EXPECT_EQ(r.status, 2) << sub << " " << flag;
      EXPECT_TRUE(one_error_line(r.err)) << r.err;
      const std::string f = flag;
      const std::string name = f.find("-ctv") == 0 || f.find("--cache-type-v") == 0 ? "--cache-type-v" : "--cache-type-k";
      EXPECT_NE(r.err.find("kvad: error: " + name + ": '"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("accepted: f16 (default), f32"), std::string::npos) << r.err;
    }
  }
}

// llama.cpp's spellings -ctk / -ctv are in the help of every command that
// takes the cache flags.
TEST(Cli, CacheTypeAliasesAreInHelp) {
  for (const char* sub : {"run", "chat", "bench", "perplexity", "serve"}) {
    Out r = run_kvad(std::string(sub) + " --help");
    EXPECT_EQ(r.status, 0) << sub;
    for (const char* want : {"--cache-type-k {f16,f32}  (-ctk)", "--cache-type-v {f16,f32}  (-ctv)"})
      EXPECT_NE(r.out.find(want), std::string::npos) << sub << ": " << r.out;
  }
}

// A directory given as --model that holds no model says so, rather than
// "not found"; one holding GGUF files names them.
TEST(Cli, DirectoryWithoutModelFilesSaysSo) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("kvad_empty_model_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Out r = run_kvad("run --model " + dir.string() + " -p hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("is a directory with no model files"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not found"), std::string::npos) << r.err;
  std::ofstream(dir / "a.gguf") << "x";
  r = run_kvad("run --model " + dir.string() + " -p hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("give one of its GGUF files: a.gguf"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// An f32 cache holds twice the bytes per token of the default f16 one (the
// figure run prints is measured from the allocation), and bench --json
// reports the types as llama-bench does (type_k, type_v).
TEST(Cli, CacheTypeF32DoublesTheKvBytes) {
  const std::string path = kvad::test::find_model("smollm2-135m");
  if (path.empty()) GTEST_SKIP() << "model smollm2-135m not installed";
  auto kv_bytes = [](const std::string& err) {
    const size_t at = err.find("KV cache ");
    return at == std::string::npos ? -1L : std::stol(err.substr(at + 9));
  };
  const Out f16 = run_kvad("run -m " + path + " -p hi -n 2 --temp 0");
  const Out f32 = run_kvad("run -m " + path + " -p hi -n 2 --temp 0 -ctk f32 -ctv f32");
  const Out k32 = run_kvad("run -m " + path + " -p hi -n 2 --temp 0 --cache-type-k f32");
  ASSERT_EQ(f16.status, 0) << f16.err;
  ASSERT_EQ(f32.status, 0) << f32.err;
  ASSERT_EQ(k32.status, 0) << k32.err;
  EXPECT_GT(kv_bytes(f16.err), 0) << f16.err;
  EXPECT_EQ(kv_bytes(f32.err), 2 * kv_bytes(f16.err)) << f32.err;
  EXPECT_EQ(2 * kv_bytes(k32.err), 3 * kv_bytes(f16.err)) << k32.err;  // keys f32, values f16
  const Out b = run_kvad("bench -m " + path + " -p 8 -n 2 -r 1 --json -ctk f32");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.out.find("\"type_k\": \"f32\""), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("\"type_v\": \"f16\""), std::string::npos) << b.out;
}

// An integer flag given a non-integer says so (CLI11's range check alone
// would report "Value abc not in range"), and a number out of range names the
// range; both before any model is read, with the usage-error status 2.
TEST(Cli, NonIntegerFlagValueIsOneLineError) {
  for (const char* flag : {"--state-snapshot-every abc", "-t 1.5", "-c 12k", "--spec-ngram abc", "--draft-max x"}) {
    Out r = run_kvad(std::string("run --prompt hi --model /nonexistent/model.gguf ") + flag);
    EXPECT_EQ(r.status, 2) << flag;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    EXPECT_NE(r.err.find("expects an integer, got '"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("/nonexistent"), std::string::npos) << r.err;
  }
  Out r = run_kvad("run --prompt hi --model /nonexistent/model.gguf -c 99999999");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not in range 0 to 16777216"), std::string::npos) << r.err;
  // Sampling values outside their range, and -t on every subcommand that has it.
  for (const char* args : {"run -p hi --top-p 2", "run -p hi --min-p -0.5", "run -p hi --top-k -1",
                           "chat --repeat-penalty -1", "bench -t -3", "serve -t 5000", "perplexity -f x -t -1",
                           "embed -p x -t -2", "quantize a.gguf b.gguf --type q8_0 -t -4", "bench -r 0"}) {
    Out o = run_kvad(std::string(args) + " --model /nonexistent/model.gguf");
    EXPECT_EQ(o.status, 2) << args << ": " << o.err;
    EXPECT_NE(o.err.find("not in range"), std::string::npos) << args << ": " << o.err;
  }
}

// --- reasoning apart from the answer, and llama-cli's grammar flags --------

namespace {
const std::string kHarmonyModel = std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/hf_tiny/gpt_oss_mxfp4/llama.cpp-f32.gguf";
// gpt-oss's Harmony reply, forced by a grammar on the tiny random model (its
// real chat template; its vocabulary spells the markers with ordinary tokens).
const std::string kHarmonyGrammar =
    "'root ::= \"<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Paris.\"'";
}  // namespace

TEST(Cli, HarmonyAnalysisGoesToStderrAndTheAnswerToStdout) {
  Out r = run_kvad("run -m " + kHarmonyModel + " -p Capital? -n 200 --grammar " + kHarmonyGrammar);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Paris.\n");
  EXPECT_EQ(r.err.rfind("Think.\n", 0), 0u) << r.err;  // first on stderr, on its own line
  EXPECT_NE(r.err.find("stop: grammar"), std::string::npos) << r.err;
  // --reasoning-format none: the reply as the model wrote it.
  Out raw = run_kvad("run -m " + kHarmonyModel + " -p Capital? -n 200 --reasoning-format none --grammar " +
                     kHarmonyGrammar);
  ASSERT_EQ(raw.status, 0) << raw.err;
  EXPECT_EQ(raw.out, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Paris.\n");
  // chat: the same split, every turn.
  Out c = run_kvad("chat -m " + kHarmonyModel + " -n 200 --grammar " + kHarmonyGrammar, "Capital?\nAgain?\n");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.out, "Paris.\nParis.\n");
  EXPECT_EQ(c.err.rfind("Think.\n", 0), 0u) << c.err;
}

TEST_F(CliWithModel, ThinkBlockGoesToStderr) {
  Out r = run_kvad("run --model " + model_ + " -p hi -n 40 -t 2 --grammar 'root ::= \"<think>Hmm.</think>Blue.\"'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Blue.\n");
  EXPECT_NE(r.err.find("Hmm."), std::string::npos) << r.err;
}

TEST_F(CliWithModel, GrammarAndJsonSchemaConstrainTheReply) {
  Out r = run_kvad("run --model " + model_ + " -p \"Name a color\" -n 20 -t 2 --grammar 'root ::= \"red\" | \"green\" | \"blue\"'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.out == "red\n" || r.out == "green\n" || r.out == "blue\n") << r.out;
  EXPECT_NE(r.err.find("stop: grammar"), std::string::npos) << r.err;
  const std::string schema = R"('{"type":"object","properties":{"color":{"enum":["red","green","blue"]}},)"
                             R"("required":["color"],"additionalProperties":false}')";
  Out j = run_kvad("run --model " + model_ + " -p \"A color as JSON\" -n 40 -t 2 --temp 0 -j " + schema);
  ASSERT_EQ(j.status, 0) << j.err;
  // {"color": one of the three} with any JSON whitespace, then the end.
  std::string s;
  for (char ch : j.out)
    if (!std::isspace(static_cast<unsigned char>(ch))) s += ch;
  EXPECT_TRUE(s == R"({"color":"red"})" || s == R"({"color":"green"})" || s == R"({"color":"blue"})") << j.out;
  EXPECT_NE(j.err.find("stop: grammar"), std::string::npos) << j.err;
  // The same schema from a file (llama-cli's --json-schema-file).
  const std::string file = ::testing::TempDir() + "/color.schema.json";
  std::ofstream(file) << R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]}},)"
                      << R"("required":["color"],"additionalProperties":false})";
  Out f = run_kvad("run --model " + model_ + " -p \"A color as JSON\" -n 40 -t 2 --temp 0 --json-schema-file " + file);
  ASSERT_EQ(f.status, 0) << f.err;
  EXPECT_EQ(f.out, j.out);
}

TEST(Cli, BadGrammarFlagsAreOneLineErrors) {
  struct Case {
    std::string flags, expect;
  };
  for (const Case& c : {Case{"--grammar 'root ::= \"a'", "--grammar: "},
                        Case{"--grammar-file /nonexistent.gbnf", "--grammar-file /nonexistent.gbnf: cannot read"},
                        Case{"-j '{\"type\":'", "--json-schema: not JSON"},
                        Case{"--grammar 'root ::= \"a\"' -j '{}'", "give one"},
                        Case{"--grammar ''", "--grammar: the grammar is empty"},
                        Case{"--json-schema-file /nonexistent.json", "--json-schema-file /nonexistent.json: cannot read"}}) {
    // Refused before the model is read: the model path does not exist.
    Out r = run_kvad("run -m /nonexistent/model.gguf -p hi " + c.flags);
    EXPECT_EQ(r.status, 1) << c.flags;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.flags << ": " << r.err;
  }
}
