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

int main(int argc, char** argv) {
  // Ranks other than 0 of an MPI job print nothing but their errors.
  const int rank = kvad::dist::world_rank_hint();
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  CLI::App app{"kvad: run open-weight language models locally"};
  app.require_subcommand(1);
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
    app.parse(argc, arg_ptrs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors read like every other error: one line, non-zero status.
    std::string msg = e.what();
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({})) {
        known = known || sub->get_name() == argv[1];
        names += (names.empty() ? "" : ", ") + sub->get_name();
      }
      if (!known) msg = std::string("unknown subcommand '") + argv[1] + "' (have: " + names + ")";
    }
    if (rank == 0) std::fprintf(stderr, "kvad: error: %s (see kvad --help)\n", msg.c_str());
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
