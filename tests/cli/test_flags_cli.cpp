// Flags as a new user mistypes them (each a usage error, status 2, one
// line that says what was expected), and --quant on a GGUF (the
// quantize-once cache from a GGUF, model/quantize_once.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "model_path.h"
#include "run_kvad.h"

namespace {

namespace fs = std::filesystem;
using kvad::test::one_error_line;
using kvad::test::Out;
using kvad::test::run_kvad;

const std::string kNoModel = " --model /nonexistent/model.gguf";

// A float flag given something that is not a number says so (before any
// model is read); a number out of range keeps CLI11's range message.
TEST(CliFlags, NonNumberFloatFlagSaysANumberWasExpected) {
  for (const char* flag : {"--temp abc", "--top-p x", "--min-p 0.1.2", "--repeat-penalty 1,1", "--temp nan",
                           "--temp inf", "--temp 0x1p1", "--temp ''"}) {
    SCOPED_TRACE(flag);
    Out r = run_kvad(std::string("run --prompt hi ") + flag + kNoModel);
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    EXPECT_NE(r.err.find("expects a number, got '"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("/nonexistent"), std::string::npos) << r.err;
  }
  Out t = run_kvad("serve --request-timeout 10s" + kNoModel);
  EXPECT_EQ(t.status, 2) << t.err;
  EXPECT_NE(t.err.find("expects a number, got '10s'"), std::string::npos) << t.err;
  // Flags without a check of their own: CLI11's conversion error, said the same way.
  for (const char* args : {"serve --queue abc", "serve -b 1.5", "bench -p x"}) {
    Out c = run_kvad(std::string(args) + kNoModel);
    EXPECT_EQ(c.status, 2) << args;
    EXPECT_TRUE(one_error_line(c.err)) << c.err;
    EXPECT_NE(c.err.find(": expects an integer, got '"), std::string::npos) << c.err;
  }
  Out r = run_kvad("run --prompt hi --temp 1e9" + kNoModel);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not in range"), std::string::npos) << r.err;
  // Numbers as people write them pass the check (and fail later, at the model).
  for (const char* ok : {"--temp 0.7", "--temp .5", "--temp 1e-1", "--temp +1", "--top-p 1"}) {
    Out o = run_kvad(std::string("run --prompt hi ") + ok + kNoModel);
    EXPECT_EQ(o.status, 1) << ok << ": " << o.err;
    EXPECT_NE(o.err.find("/nonexistent"), std::string::npos) << o.err;
  }
}

// A usage error points at the help of the subcommand the user typed.
TEST(CliFlags, UsageErrorsPointAtTheSubcommandsHelp) {
  Out r = run_kvad("run --temp abc" + kNoModel);
  EXPECT_NE(r.err.find("(see kvad run --help)"), std::string::npos) << r.err;
  Out i = run_kvad("images make fox --steps x" + kNoModel);
  EXPECT_EQ(i.status, 2) << i.err;
  EXPECT_NE(i.err.find("(see kvad images make --help)"), std::string::npos) << i.err;
  Out u = run_kvad("frobnicate --x 1");
  EXPECT_EQ(u.status, 2);
  EXPECT_NE(u.err.find("(see kvad --help)"), std::string::npos) << u.err;
}

// A flag given twice: the last one wins, as in llama.cpp (so a flag added
// after an alias or a script's defaults overrides them); each value is
// still checked, as llama.cpp parses each.
TEST(CliFlags, RepeatedFlagTakesTheLastValue) {
  Out m = run_kvad("run --prompt hi --model /nonexistent/a.gguf --model /nonexistent/b.gguf");
  EXPECT_EQ(m.status, 1);
  EXPECT_TRUE(one_error_line(m.err)) << m.err;
  EXPECT_NE(m.err.find("/nonexistent/b.gguf"), std::string::npos) << m.err;
  EXPECT_EQ(m.err.find("/nonexistent/a.gguf"), std::string::npos) << m.err;
  Out ok = run_kvad("run --prompt hi --temp 1 --temp 0.5 -n 3 -n 4" + kNoModel);
  EXPECT_EQ(ok.status, 1) << ok.err;  // past the flags: the missing model
  EXPECT_NE(ok.err.find("/nonexistent"), std::string::npos) << ok.err;
  Out r = run_kvad("run --prompt hi --temp 1 --temp 2000" + kNoModel);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("2000"), std::string::npos) << r.err;
}

// A flag whose value is missing does not take the next flag as its value.
TEST(CliFlags, MissingValueIsNotTheNextFlag) {
  for (const char* args : {"run --prompt --temp 1", "run --prompt -n 4", "run -p --temp 0", "chat --system --temp 1",
                           "run --prompt hi --model --temp 1", "run --prompt hi -m -n 3"}) {
    SCOPED_TRACE(args);
    Out r = run_kvad(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    EXPECT_NE(r.err.find("needs a value"), std::string::npos) << r.err;
  }
  // A value that only starts with a dash is a value: a negative number.
  Out r = run_kvad("run --prompt hi --seed -1" + kNoModel);
  EXPECT_EQ(r.status, 1) << r.err;
}

// --draft-max, --draft-min and --draft-fixed tune a speculation that is off
// without --spec-ngram or --model-draft: a usage error naming the fix.
TEST(CliFlags, DraftFlagsWithoutAProposerAreUsageErrors) {
  for (const char* flag : {"--draft-max 4", "--draft-min 1", "--draft-fixed"}) {
    for (const char* cmd : {"run --prompt hi", "chat", "bench"}) {
      SCOPED_TRACE(std::string(cmd) + " " + flag);
      Out r = run_kvad(std::string(cmd) + " " + flag + kNoModel);
      EXPECT_EQ(r.status, 2) << r.err;
      EXPECT_TRUE(one_error_line(r.err)) << r.err;
      EXPECT_NE(r.err.find("--spec-ngram N or --model-draft M"), std::string::npos) << r.err;
    }
  }
  Out r = run_kvad("run --prompt hi --spec-ngram 3 --draft-max 4" + kNoModel);
  EXPECT_EQ(r.status, 1) << r.err;  // accepted: the model is what is missing
}

// The trial's other findings: a bad KV cache type is a usage error, -ctk
// and -ctv are in --help, and an empty directory says it holds no model.
TEST(CliFlags, CacheTypeHelpAndEmptyDirectory) {
  for (const char* flag : {"--cache-type-k q9", "-ctk q9", "-ctv bf17"}) {
    Out r = run_kvad(std::string("run --prompt hi ") + flag + kNoModel);
    EXPECT_EQ(r.status, 2) << flag << ": " << r.err;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
  }
  Out h = run_kvad("run --help");
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("-ctk"), std::string::npos);
  EXPECT_NE(h.out.find("-ctv"), std::string::npos);
  const fs::path dir = fs::temp_directory_path() / ("kvad-empty-model-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Out e = run_kvad("run --prompt hi --model " + dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(e.status, 1);
  EXPECT_TRUE(one_error_line(e.err)) << e.err;
  EXPECT_EQ(e.err.find("not found"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("no model files"), std::string::npos) << e.err;
}

// --quant on a GGUF: converted once into $KVAD_HOME/cache and reused on the
// next run; requantizing the store's quantized SmolLM2 warns (one line)
// that its quality is bounded by the stored format; dequantizing (f16)
// does not warn.
TEST(CliFlags, QuantOnAGgufConvertsOnceAndWarnsOnRequantizing) {
  const std::string model = kvad::test::find_model("smollm2-135m");
  if (model.empty()) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  const fs::path home = fs::temp_directory_path() / ("kvad-gguf-quant-" + std::to_string(::getpid()));
  fs::remove_all(home);
  const char* old = std::getenv("KVAD_HOME");
  const std::string saved = old ? old : "";
  ::setenv("KVAD_HOME", home.c_str(), 1);  // the cache goes there (the model is named by path)
  const std::string run = "run --model " + model + " --prompt \"The capital of France is\" --raw -n 6 --temp 0 -t 2";
  Out first = run_kvad(run + " --quant q8_0");
  Out second = run_kvad(run + " --quant q8_0");
  Out f16 = run_kvad(run + " --quant f16");
  Out bad = run_kvad(run + " --quant q4_k");
  size_t entries = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(home / "cache", ec)) entries += e.path().extension() == ".gguf";
  if (old) ::setenv("KVAD_HOME", saved.c_str(), 1);
  else ::unsetenv("KVAD_HOME");
  fs::remove_all(home);

  EXPECT_EQ(first.status, 0) << first.err;
  EXPECT_NE(first.out.find("Paris"), std::string::npos) << first.out;
  EXPECT_NE(first.err.find("kvad: converted to q8_0 once"), std::string::npos) << first.err;
  const auto warning = [](const std::string& err) {
    const size_t at = err.find("kvad: warning: requantizing ");
    if (at == std::string::npos) return std::string();
    return err.substr(at, err.find('\n', at) - at);
  };
  const std::string w = warning(first.err);
  EXPECT_NE(w.find("to q8_0: its quality is bounded by"), std::string::npos) << first.err;
  EXPECT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.err.find("kvad: q8_0 from the quantize-once cache: " + (home / "cache").string()), std::string::npos)
      << second.err;
  EXPECT_EQ(second.err.find("converted to"), std::string::npos) << second.err;
  EXPECT_EQ(warning(second.err), w);  // every load of the form says it
  EXPECT_EQ(second.out, first.out);
  EXPECT_EQ(f16.status, 0) << f16.err;
  EXPECT_NE(f16.err.find("kvad: converted to f16 once"), std::string::npos) << f16.err;
  EXPECT_EQ(warning(f16.err), "") << f16.err;  // dequantizing loses nothing
  EXPECT_NE(f16.out.find("Paris"), std::string::npos) << f16.out;
  EXPECT_EQ(entries, 2u);
  // A GPU-only type on the CPU: the error lists what the CPU takes.
  EXPECT_EQ(bad.status, 1) << bad.err;
  EXPECT_TRUE(one_error_line(bad.err)) << bad.err;
  EXPECT_NE(bad.err.find("q4_k_m"), std::string::npos) << bad.err;
}

}  // namespace
