// kvad: the command-line entry point. Subcommands live one per file (commands.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "base/error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvad: run open-weight language models locally"};
  app.require_subcommand(1);
  kvad::cli::add_run(app);
  kvad::cli::add_tokenize(app);
  kvad::cli::add_bench(app);
  kvad::cli::add_template(app);
  kvad::cli::add_chat(app);
  kvad::cli::add_serve(app);
  kvad::cli::add_quantize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvad::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvad: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvad: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
