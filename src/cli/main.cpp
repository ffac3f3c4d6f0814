// kvad: the command-line entry point. Subcommands live one per file (commands.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/error.h"
#include "dist/comm.h"
#include "cli/commands.h"
#include "cli/generation_options.h"

namespace {

// "--prompt needs a value ..." when a flag that takes a value is last or is
// followed by another of the command's flags (CLI11 would take that flag as
// the value: `--prompt --temp 1` ran the prompt "--temp"); "" otherwise. A
// value that starts with a dash but is no flag (-1) stays a value, and
// --flag=VALUE passes anything.
std::string missing_value(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* cur = &app;
  auto flag_of = [&](const std::string& a) -> CLI::Option* {
    if (a.size() < 2 || a[0] != '-' || a == "--") return nullptr;
    const std::string name = a.substr(0, a.find('='));
    return cur->get_option_no_throw(name);
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.empty() || a[0] != '-') {
      for (CLI::App* sub : cur->get_subcommands({}))
        if (sub->get_name() == a) {
          cur = sub;
          break;
        }
      continue;
    }
    CLI::Option* o = flag_of(a);
    if (!o || a.find('=') != std::string::npos || o->get_type_size_min() <= 0 || o->get_expected_min() <= 0) continue;
    if (a.size() > 2 && a[1] != '-') continue;  // -n4: the value is attached
    if (i + 1 == args.size()) return a + " needs a value";
    if (flag_of(args[i + 1])) {
      const std::string lng = o->get_lnames().empty() ? a : "--" + o->get_lnames()[0];
      return a + " needs a value, and " + args[i + 1] + " after it is a flag (a value that looks like a flag goes as " +
             lng + "=VALUE)";
    }
  }
  return "";
}

// CLI11's "Could not convert: --queue = abc" as the number checks say it
// ("--queue: expects an integer, got 'abc'"); `msg` itself otherwise.
// The help to point a usage error at: "kvad images make --help" for a
// nested subcommand the user named, "kvad run --help", else "kvad --help".
std::string help_hint(const CLI::App& app, const std::vector<std::string>& args) {
  std::string hint = "kvad";
  const CLI::App* at = &app;
  for (size_t i = 1; i < args.size() && !args[i].empty() && args[i][0] != '-'; ++i) {
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : at->get_subcommands({}))
      if (sub->get_name() == args[i]) next = sub;
    if (!next) break;
    hint += " " + args[i];
    at = next;
  }
  return hint + " --help";
}

std::string conversion_message(CLI::App& app, const std::vector<std::string>& args, const std::string& msg) {
  const std::string head = "Could not convert: ";
  const size_t eq = msg.find(" = ");
  if (msg.rfind(head, 0) != 0 || eq == std::string::npos) return msg;
  const std::string name = msg.substr(head.size(), eq - head.size()), value = msg.substr(eq + 3);
  CLI::App* cur = &app;
  for (size_t i = 1; i < args.size(); ++i)
    for (CLI::App* sub : cur->get_subcommands({}))
      if (sub->get_name() == args[i]) cur = sub;
  const CLI::Option* o = cur->get_option_no_throw(name);
  if (!o) return msg;
  const std::string type = o->get_type_name();
  const std::string what = type.rfind("INT", 0) == 0     ? "an integer"
                           : type.rfind("UINT", 0) == 0  ? "a non-negative integer"
                           : type.rfind("FLOAT", 0) == 0 ? "a number"
                                                         : "a value of type " + type;
  return name + ": expects " + what + ", got '" + value + "'";
}

}  // namespace

int main(int argc, char** argv) {
  // Ranks other than 0 of an MPI job print nothing but their errors.
  const int rank = kvad::dist::world_rank_hint();
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  CLI::App app{"kvad: run open-weight language models locally"};
  app.require_subcommand(1);
  // A flag given twice takes its last value, as llama.cpp's do (each value
  // is still checked). Subcommands copy these defaults when they are made.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  kvad::cli::add_run(app);
  kvad::cli::add_tokenize(app);
  kvad::cli::add_bench(app);
  kvad::cli::add_template(app);
  kvad::cli::add_chat(app);
  kvad::cli::add_serve(app);
  kvad::cli::add_quantize(app);
  kvad::cli::add_pull(app);
  kvad::cli::add_cache(app);
  kvad::cli::add_perplexity(app);
  kvad::cli::add_embed(app);
  kvad::cli::add_tui(app);
  kvad::cli::add_images(app);
  // Of the subcommands only run and bench split a model over ranks (the
  // others would run one whole copy per rank).
  if (kvad::dist::launched_size() > 1 && argc > 1 && std::string(argv[1]) != "run" && std::string(argv[1]) != "bench" &&
      argv[1][0] != '-') {
    if (rank == 0)
      std::fprintf(stderr, "kvad: error: kvad %s does not run on several ranks yet (run and bench do, with -pp)\n",
                   argv[1]);
    return 1;
  }
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) {
    a = kvad::cli::llama_flag_alias(a);
    arg_ptrs.push_back(a.data());
  }
  try {
    if (const std::string why = missing_value(app, args); !why.empty()) {
      std::fprintf(stderr, "kvad: error: %s (see %s)\n", why.c_str(), help_hint(app, args).c_str());
      return 2;
    }
    app.parse(argc, arg_ptrs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors read like every other error: one line, non-zero status.
    std::string msg = conversion_message(app, args, e.what());
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({})) {
        known = known || sub->get_name() == argv[1];
        names += (names.empty() ? "" : ", ") + sub->get_name();
      }
      if (!known) msg = std::string("unknown subcommand '") + argv[1] + "' (have: " + names + ")";
    }
    if (rank == 0) std::fprintf(stderr, "kvad: error: %s (see %s)\n", msg.c_str(), help_hint(app, args).c_str());
    return 2;
  } catch (const kvad::dist::AgreedError& e) {
    // Every rank has it; rank 0 says it.
    std::fflush(stdout);
    if (rank == 0) std::fprintf(stderr, "kvad: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    if (rank == 0) std::fprintf(stderr, "kvad: error: %s\n", e.what());
    else std::fprintf(stderr, "kvad: error: rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
