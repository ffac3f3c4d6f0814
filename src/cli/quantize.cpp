// `kvad quantize IN.gguf OUT.gguf --type TYPE`: an F32/F16/BF16 model to a
// quantized one, like llama-quantize. The rules are in io/quantize.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <algorithm>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/generation_options.h"
#include "cli/model_store.h"
#include "io/gguf.h"
#include "io/quantize.h"

namespace kvad::cli {

namespace {

struct QuantizeOptions {
  std::string input, output, type;
  int threads = 0;
};

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s;
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? "x" : "") + std::to_string(ne[k]);
  return s;
}

void quantize(const QuantizeOptions& o) {
  const quant::QuantType& type = quant::find_quant_type(o.type);  // an unknown type fails before any reading
  const std::string in = resolve_model(o.input);
  const int n_threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  size_t name_width = 0, count_width = 1;
  bool header_done = false;
  quant::Options opt;
  opt.threads = n_threads;
  opt.progress = [&](const quant::Progress& p) {
    const gguf::TensorInfo& t = p.input->tensors()[p.index];
    if (!header_done) {
      // Printed once the plan is made and the output created: an error before
      // that stays the one line main() prints.
      std::fprintf(stderr, "kvad quantize: %s -> %s, --type %s (general.file_type %u), %d threads\n", in.c_str(),
                   o.output.c_str(), type.name, type.file_type, n_threads);
      for (const gguf::TensorInfo& u : p.input->tensors()) name_width = std::max(name_width, u.name.size());
      count_width = std::to_string(p.count).size();
      header_done = true;
    }
    std::string to;
    if (!p.choice->quantize) {
      to = "(copied)";
    } else {
      to = std::string("-> ") + dtype_name(p.choice->type);
      if (p.choice->fallback)
        to += std::string(" (fallback for ") + dtype_name(p.choice->wanted) + ", rows not a multiple of " +
              std::to_string(dtype_info(p.choice->wanted).block_elems) + ")";
    }
    std::fprintf(stderr, "[%*zu/%zu] %-*s  %-12s  %s %s  %.1f ms\n", static_cast<int>(count_width), p.index + 1,
                 p.count, static_cast<int>(name_width), t.name.c_str(), shape_str(t.ne).c_str(), dtype_name(t.type),
                 to.c_str(), p.ms);
  };
  const quant::Result r = quant::quantize_file(in, o.output, type, opt);
  std::fprintf(stderr,
               "kvad quantize: wrote %s: %zu tensors (%zu quantized, %zu by a fallback type), "
               "%.1f MiB -> %.1f MiB, %.2f s\n",
               o.output.c_str(), r.n_tensors, r.n_quantized, r.n_fallback, r.in_bytes / 1048576.0,
               r.out_bytes / 1048576.0, r.seconds);
}

}  // namespace

void add_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* c = app.add_subcommand(
      "quantize",
      "Quantize an F32/F16/BF16 GGUF model (like llama-quantize); every metadata key is kept. Progress per tensor on "
      "stderr");
  c->add_option("input", o->input, "Input GGUF (F32, F16 or BF16 weights) or model-store name")->required();
  c->add_option("output", o->output, "Output GGUF (written as OUTPUT.tmp and renamed when complete)")->required();
  c->add_option("--type", o->type,
                "Output type: " + quant::quant_type_names() +
                    ". q3_k_m, q4_k_s, q4_k_m and q5_k_m give some tensors more bits (llama.cpp's mixtures); the "
                    "others use one type for every quantized tensor")
      ->required();
  add_threads_option(c, o->threads);
  c->callback([o] { quantize(*o); });
}

}  // namespace kvad::cli
