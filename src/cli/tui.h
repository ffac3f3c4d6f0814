// `kvad tui`: the pieces its three files share.
//
//  - tui_engine.cpp: the worker thread that owns the model, the Session and
//    the conversation's tokens; it loads forms, runs turns and publishes what
//    the screen shows (TuiState) under one mutex.
//  - tui_view.cpp: draws a TuiState snapshot with ncurses (conversation pane,
//    figures panel, input line, footer); reads nothing else.
//  - tui.cpp: the subcommand, the key loop and the input line.
//
// Only the UI thread calls ncurses; the worker never does.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/generation_options.h"
#include "cli/loaded_model.h"
#include "cli/speculation.h"
#include "model/registry.h"

namespace kvad::cli::tui {

struct TuiOptions : GenerationOptions {
  TuiOptions() { max_tokens = 512; }
  std::string system;
  SpecFlags spec;  ///< --spec-ngram / --model-draft: replies speculate (cli/speculation.h)
};

/// One way to run the model: a backend and a weight format. The six the
/// issue names, in the order `p` cycles them.
struct Form {
  std::string label;     ///< "cpu as stored", "cpu q8_0", "gpu bf16", ...
  DeviceOptions device;  ///< what load_for_cli gets
  std::string why_not;   ///< empty when this build, machine and model can load it
  // The last reply's speed in this form (0: none yet).
  double prefill_tps = 0, decode_tps = 0;
};

/// The forms for a model: `checkpoint` is true for an HF checkpoint, false
/// for a GGUF; either takes q8_0/q4_0 on the CPU through the quantize-once
/// cache (a GGUF dequantized and requantized, load_for_cli). GPU forms
/// carry backend_unavailable("cuda")'s reason where there is no usable
/// GPU, or the registry's when `arch` has no CUDA backend. `dtype` names the GPU's dense format (--dtype).
std::vector<Form> make_forms(bool checkpoint, const std::string& arch, const std::string& dtype);

/// The index of the form that --device/--quant ask for, or -1 when none
/// matches (e.g. --device sim or --quant q6_k).
int form_index(const std::vector<Form>& forms, const DeviceOptions& d);

struct Message {
  std::string role;  ///< "user", "assistant", or "note" (kvad's own line, never sent to the model)
  std::string text;  ///< UTF-8
  std::string form;  ///< assistant: the form that wrote it ("cpu q8_0")
};

/// What the figures panel shows. Rates are tokens per second, sizes bytes,
/// times seconds; 0 means "not measured yet".
struct Figures {
  std::string model;        ///< the --model as resolved (file or checkpoint name)
  std::string arch;         ///< general.architecture
  int64_t n_layer = 0;
  std::string backend;      ///< "cpu", "cuda", ...
  std::string weight_format;  ///< "q8_0", "bf16 (from q8_0)", ...
  double prefill_tps = 0;   ///< the last prefill (turn or re-prefill)
  int32_t prefill_tokens = 0;
  bool prefill_was_reprefill = false;
  double decode_tps = 0;    ///< of the current (or last) reply; live while it streams
  int32_t decode_tokens = 0;
  double ttft_s = 0;        ///< send to first piece of text
  int32_t cached_tokens = -1;  ///< prompt tokens the last turn reused (-1: no turn yet)
  int32_t ctx_used = 0, n_ctx = 0;
  size_t weight_bytes = 0, kv_bytes = 0, kv_bytes_per_token = 0;
  size_t rss_bytes = 0, peak_rss_bytes = 0;
  double load_s = 0;
  /// Speculation: the proposer ("ngram 3", "draft FILE"; "" when off) and
  /// the last reply's proposed and accepted draft tokens.
  std::string spec;
  int64_t spec_proposed = 0, spec_accepted = 0;
  std::vector<double> history;  ///< decode tok/s of the last replies, oldest first
};

/// Everything the screen shows that the worker changes.
struct View {
  std::vector<Message> conversation;
  std::string system;
  Figures fig;
  std::vector<Form> forms;
  int form = 0;             ///< the loaded form
  std::string busy;         ///< "" when idle, else what the worker is doing
  bool generating = false;  ///< a reply is streaming (Esc stops it)
  std::string status;       ///< the last note ("re-prefilled 120 tokens ...")
  std::string error;        ///< the last error, shown until the next action
  /// The last line kvad wrote to stderr since the last command (a load's
  /// notes: "quantized to q8_0 once ..."); the status line shows it when
  /// nothing else is to be said.
  std::string log;
  uint64_t version = 0;     ///< bumped on every change, so the UI redraws
};

/// The View the worker writes and the UI copies, under `mu`.
struct TuiState {
  std::mutex mu;
  View v;
};

class Engine;

/// The worker: owns the loaded model and runs one command at a time from a
/// queue. Every public call returns at once; results land in state().
class Worker {
 public:
  /// Takes the model loaded for form `form` (load_for_cli's result, loaded
  /// before the screen starts so that a bad --model is an ordinary error).
  Worker(const TuiOptions& o, std::vector<Form> forms, int form, LoadedModel model);
  ~Worker();  ///< stops the reply, finishes the running command, joins

  TuiState& state() { return state_; }
  /// Queues a user turn. False (with state().error set) when busy.
  bool send(const std::string& text);
  /// Stops the streaming reply after the token in flight (no-op when idle).
  void stop();
  /// Queues a switch to the next form that can load (cycling); sets
  /// state().error when there is none or the worker is busy.
  void next_form();
  /// Clears the conversation (keeps the system prompt).
  void reset();
  /// Sets the system prompt (empty: none) and clears the conversation.
  void set_system(const std::string& text);

 private:
  void post(std::function<void(Engine&)> job, const std::string& busy);
  void loop();

  TuiState state_;
  std::unique_ptr<Engine> engine_;
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::function<void(Engine&)>> queue_;
  bool quit_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// The input line as the screen shows it.
struct InputView {
  std::u32string text;       ///< the line being edited
  size_t cursor = 0;         ///< index into text
  std::string mode = "keys";  ///< "keys" (p r s q act), "message" or "system" (every key types)
};

/// Draws the whole screen from `v` (a copy the UI took under the lock) and
/// the input line `in`; `scroll` is how many lines the conversation is
/// scrolled back from its end (clamped in place to what there is). Safe for
/// any terminal size, 1x1 included (below 30x6 it only says so).
void draw(const View& v, const InputView& in, int& scroll);

/// Colours are used when the terminal has them and NO_COLOR is unset;
/// UTF-8 drawing when the locale is UTF-8. Call once after initscr().
void init_style();

/// UTF-8 <-> UTF-32 (invalid bytes become U+FFFD).
std::u32string to_u32(const std::string& s);
std::string to_utf8(const std::u32string& s);

}  // namespace kvad::cli::tui
