// One function per `kvad` subcommand; each file in cli/ adds one.
#pragma once

namespace CLI { class App; }

namespace kvad::cli {

/// Each adds its subcommand (options and callback) to the app. A callback
/// reports failure by throwing kvad::Error; main() prints it as one line,
/// `kvad: error: ...`, and exits with status 1.
void add_run(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_bench(CLI::App& app);
void add_template(CLI::App& app);
void add_chat(CLI::App& app);
void add_serve(CLI::App& app);
void add_quantize(CLI::App& app);
void add_pull(CLI::App& app);
void add_cache(CLI::App& app);
void add_perplexity(CLI::App& app);
void add_embed(CLI::App& app);
void add_tui(CLI::App& app);
void add_images(CLI::App& app);

}  // namespace kvad::cli
