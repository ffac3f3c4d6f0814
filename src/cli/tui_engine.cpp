// `kvad tui`'s worker: the model, the Session, the conversation's tokens,
// and the figures, on a thread of their own so that the screen never waits
// for a forward pass (tui.h).
//
// A turn works as `kvad chat`'s does: the whole conversation is rendered
// with the chat template and only the tokens past the longest common prefix
// with what the Session holds are evaluated (DESIGN.md seam 6). A form
// switch loads the model anew through load_for_cli (the quantize-once cache
// for the CPU's q8_0/q4_0, from an HF checkpoint or a GGUF), then
// re-prefills the conversation so that the next turn reuses it on the new
// backend.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "cli/model_store.h"
#include "cli/tui.h"
#include "engine/chat_prompt.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/tensor_source.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli::tui {

namespace {

using json = nlohmann::ordered_json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Resident set size now, bytes (/proc/self/statm's second field); 0 when unreadable.
size_t rss_now() {
  std::ifstream f("/proc/self/statm");
  size_t pages_total = 0, pages_resident = 0;
  if (!(f >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// The format most of the model's matrix bytes are stored in ("q8_0", "bf16").
std::string stored_format(const Model& m) {
  std::map<std::string, size_t> bytes;
  for (const SourceTensor& t : m.source().tensors())
    if (t.n_dims >= 2) bytes[dtype_name(t.type)] += t.n_bytes;
  std::string best = "?";
  size_t most = 0;
  for (const auto& [name, n] : bytes)
    if (n > most) most = n, best = name;
  return best;
}

std::string tps(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

}  // namespace

std::vector<Form> make_forms(bool checkpoint, const std::string& arch, const std::string& dtype) {
  std::vector<Form> f;
  const std::string cpu_none = checkpoint ? "none" : "";
  f.push_back({"cpu as stored", {"cpu", dtype, cpu_none}, ""});
  // Every model takes the CPU forms: an HF checkpoint and a GGUF alike are
  // converted once through the quantize-once cache (a GGUF dequantized,
  // then requantized).
  for (const char* q : {"q8_0", "q4_0"}) f.push_back({std::string("cpu ") + q, {"cpu", dtype, q}, ""});
  std::string gpu_why = backend_unavailable("cuda");
  if (gpu_why.empty()) {
    const ArchEntry* e = find_architecture(arch);
    if (!e || !missing_ops(*e, DeviceType::CUDA).empty())
      gpu_why = "architecture " + arch + " does not run on cuda" +
                (e ? ", whose row has no " + missing_ops(*e, DeviceType::CUDA).str() : std::string()) +
                " (cuda runs: " + supported_architectures("cuda") + ")";
  }
  for (const char* q : {"none", "q8_0", "q4_0"}) {
    const std::string name = std::string(q) == "none" ? dtype : q;
    f.push_back({"gpu " + name, {"cuda", dtype, q}, gpu_why});
  }
  return f;
}

int form_index(const std::vector<Form>& forms, const DeviceOptions& d) {
  const bool gpu = d.device.rfind("cuda", 0) == 0;
  if (d.device != "cpu" && !gpu) return -1;
  const std::string q = d.quant.empty() ? "none" : d.quant;
  for (size_t i = 0; i < forms.size(); ++i) {
    const Form& f = forms[i];
    const std::string fq = f.device.quant.empty() ? "none" : f.device.quant;
    if ((f.device.device == "cuda") == gpu && fq == q) return static_cast<int>(i);
  }
  return -1;
}

// The worker's own state: touched only on the worker thread, except through
// TuiState (under its mutex).
class Engine {
 public:
  Engine(const TuiOptions& o, TuiState& st, std::atomic<bool>& stop, LoadedModel m, int form)
      : o_(o), st_(st), stop_(stop), system_(o.system) {
    sp_ = m.sampler_params(o);
    install(std::move(m), form);
  }

  void turn(const std::string& user) {
    stop_.store(false);
    turns_.push_back({{"role", "user"}, {"content", user}});
    {
      std::lock_guard<std::mutex> l(st_.mu);
      st_.v.conversation.push_back({"user", user, ""});
      st_.v.conversation.push_back({"assistant", "", st_.v.forms[st_.v.form].label});
      st_.v.generating = true;
      st_.v.fig.decode_tps = 0;
      st_.v.fig.decode_tokens = 0;
      st_.v.fig.ttft_s = 0;
      ++st_.v.version;
    }
    try {
      run_turn();
    } catch (const Error& e) {
      // Nothing of this turn stays: the user turn leaves the conversation the
      // model sees, and the cache starts over (the failure may have left it
      // part-way through the prompt).
      if (!turns_.empty() && turns_.back()["role"] == "user") turns_.erase(turns_.end() - 1);
      held_.clear();
      session_->truncate(0, 0);
      std::lock_guard<std::mutex> l(st_.mu);
      auto& c = st_.v.conversation;
      if (!c.empty() && c.back().role == "assistant" && c.back().text.empty()) c.pop_back();
      c.push_back({"note", std::string("that turn failed: ") + e.what(), ""});
      st_.v.error = e.what();
      st_.v.generating = false;
      ++st_.v.version;
    }
  }

  void switch_to(int form) {
    Form f;
    {
      std::lock_guard<std::mutex> l(st_.mu);
      f = st_.v.forms[form];
    }
    const double t0 = now_s();
    try {
      install(load_for_cli(o_.model, f.device), form);
    } catch (const Error& e) {
      // The form that was running stays loaded; this one is greyed from now on.
      std::lock_guard<std::mutex> l(st_.mu);
      st_.v.forms[form].why_not = std::string("failed to load: ") + e.what();
      st_.v.error = "cannot switch to " + f.label + ": " + e.what();
      ++st_.v.version;
      return;
    }
    const double load = now_s() - t0;
    const std::string pre = reprefill();
    std::lock_guard<std::mutex> l(st_.mu);
    char b[96];
    std::snprintf(b, sizeof b, "switched to %s: loaded in %.2f s", f.label.c_str(), load);
    st_.v.status = b + pre;
    ++st_.v.version;
  }

  void reset() {
    turns_ = json::array();
    held_.clear();
    session_->truncate(0, 0);
    std::lock_guard<std::mutex> l(st_.mu);
    st_.v.conversation.clear();
    st_.v.status = "conversation cleared";
    st_.v.fig.ctx_used = 0;
    st_.v.fig.cached_tokens = -1;
    ++st_.v.version;
  }

  void set_system(const std::string& text) {
    system_ = text;
    reset();
    std::lock_guard<std::mutex> l(st_.mu);
    st_.v.system = text;
    st_.v.status = text.empty() ? "system prompt removed; conversation cleared" : "system prompt set; conversation cleared";
    ++st_.v.version;
  }

 private:
  // Makes `m` the running model in form `form`: a new Session, chat format
  // and sampler; the figures that describe the model.
  void install(LoadedModel m, int form) {
    std::optional<ChatPrompt> prompt;
    std::string note;
    try {
      prompt.emplace(chat_prompt(m));
    } catch (const ChatTemplateError&) {
      throw;
    } catch (const Error&) {
      note = m.path + " has no chat template: each message continues the text as is";
    }
    const int32_t n_ctx = o_.context_size(m.model->hparams());
    auto session = std::make_unique<Session>(m.model, n_ctx, 1, o_.threads, o_.cache_type.types());
    session->set_lora(o_.lora_set(*m.model, /*report=*/false));  // --lora: for each model the TUI runs
    // The proposer follows the form: a draft model loads on its device.
    DeviceOptions dev;
    {
      std::lock_guard<std::mutex> l(st_.mu);
      dev = st_.v.forms[static_cast<size_t>(form)].device;
    }
    std::unique_ptr<Speculation> spec = make_speculation(o_.spec, m, *session, dev, n_ctx, o_.threads, o_.cache_type.types(), sp_);
    // Past this point nothing throws: the new model replaces the old one.
    spec_.reset();
    session_.reset();
    prompt_.reset();
    m_ = std::move(m);
    prompt_ = std::move(prompt);
    session_ = std::move(session);
    spec_ = std::move(spec);
    n_ctx_ = n_ctx;
    held_.clear();
    sampler_ = std::make_unique<Sampler>(sp_);
    const HParams& hp = m_.model->hparams();
    std::lock_guard<std::mutex> l(st_.mu);
    Figures& g = st_.v.fig;
    const Form& f = st_.v.forms[form];
    st_.v.form = form;
    g.model = o_.model.empty() ? std::string(kDefaultModel) : o_.model;
    g.arch = hp.arch;
    g.n_layer = hp.n_layer;
    g.backend = f.device.device;
    const std::string stored = stored_format(*m_.model);
    if (f.device.device == "cuda" && f.device.quant == "none" && stored != f.device.dtype)
      g.weight_format = f.device.dtype + " (from " + stored + ")";
    else if (f.device.device == "cuda" && f.device.quant != "none" && !f.device.quant.empty() && stored != f.device.quant)
      g.weight_format = f.device.quant + " (from " + stored + ")";
    else
      g.weight_format = stored;
    g.n_ctx = n_ctx_;
    g.ctx_used = 0;
    // This form has no reply yet: its figures start blank (the forms table
    // keeps the others' for comparison).
    g.prefill_tps = g.decode_tps = g.ttft_s = 0;
    g.prefill_tokens = g.decode_tokens = 0;
    g.cached_tokens = -1;
    g.spec = spec_ ? spec_->describe : "";
    g.spec_proposed = g.spec_accepted = 0;
    g.load_s = m_.load_s;
    if (!note.empty()) st_.v.conversation.push_back({"note", note, ""});
    memory_figures();
    ++st_.v.version;
  }

  // Under st_.mu.
  void memory_figures() {
    Figures& g = st_.v.fig;
    g.weight_bytes = m_.model->weight_bytes();
    g.kv_bytes = session_->cache().bytes();
    g.kv_bytes_per_token = session_->cache().bytes_per_token();
    g.rss_bytes = rss_now();
    // ru_maxrss and /proc's resident count are sampled apart: the peak is
    // never shown below the figure beside it.
    g.peak_rss_bytes = std::max(peak_rss_bytes(), g.rss_bytes);
    g.ctx_used = session_->cached(0);
  }

  json messages() const {
    json msgs = json::array();
    if (!system_.empty()) msgs.push_back({{"role", "system"}, {"content", system_}});
    for (const auto& t : turns_) msgs.push_back(t);
    return msgs;
  }

  // The conversation as tokens: the chat template's rendering (with the
  // assistant's turn opened when `open`), or, for a model without one, the
  // text as is.
  std::vector<int32_t> tokens(bool open) const {
    if (prompt_) return prompt_->tokenize(messages(), open);
    std::string text = system_.empty() ? "" : system_ + "\n\n";
    for (const auto& t : turns_) text += t["content"].get<std::string>();
    return m_.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  }

  void run_turn() {
    // Room for the reply: a quarter of the context, or max_tokens when less.
    const int32_t reserve = std::min<int32_t>(n_ctx_ / 4, o_.max_tokens > 0 ? o_.max_tokens : n_ctx_ / 4);
    std::vector<int32_t> ids = tokens(true);
    int dropped = 0;
    while (static_cast<int32_t>(ids.size()) + reserve > n_ctx_ && turns_.size() > 1) {
      turns_.erase(turns_.begin());
      if (!turns_.empty() && turns_[0]["role"] == "assistant") turns_.erase(turns_.begin());
      ++dropped;
      ids = tokens(true);
    }
    if (static_cast<int32_t>(ids.size()) + 1 > n_ctx_)
      throw Error("this message alone (" + std::to_string(ids.size()) + " tokens) does not fit the context (" +
                  std::to_string(n_ctx_) + " tokens; start with a larger --ctx-size)");
    if (dropped) {
      std::lock_guard<std::mutex> l(st_.mu);
      st_.v.status = "the conversation outgrew the context (" + std::to_string(n_ctx_) + " tokens): the model no "
                     "longer sees the " + std::to_string(dropped) + " oldest turn(s)";
    }
    GenerateOptions go;
    go.max_tokens = std::min<int32_t>(o_.max_tokens < 0 ? n_ctx_ : o_.max_tokens,
                                      n_ctx_ - static_cast<int32_t>(ids.size()));
    go.held = &held_;
    go.proposer = spec_ ? spec_->proposer.get() : nullptr;
    go.spec = o_.spec.spec;
    // The prompt tokens generate() will evaluate (it keeps at least one), for
    // the prefill figure shown at the first token; the exact one comes after.
    const int32_t n_new = static_cast<int32_t>(ids.size() - std::min(common_prefix(held_, ids), ids.size() - 1));
    std::string reply;
    const double t0 = now_s();
    double first = 0;
    int32_t pieces = 0;
    const GenerateStats s = generate(*session_, *m_.tokenizer, *sampler_, ids, go, [&](const std::string& piece) {
      if (stop_.load()) return false;
      const double t = now_s();
      reply += piece;
      std::lock_guard<std::mutex> l(st_.mu);
      Figures& g = st_.v.fig;
      if (pieces++ == 0) {
        first = t;
        g.ttft_s = t - t0;
        g.prefill_tps = n_new / g.ttft_s;
        g.prefill_tokens = n_new;
        g.prefill_was_reprefill = false;
      } else {
        g.decode_tps = (pieces - 1) / (t - first);
      }
      g.decode_tokens = pieces;
      g.ctx_used = session_->cached(0);
      st_.v.conversation.back().text += piece;
      ++st_.v.version;
      return true;
    });
    turns_.push_back({{"role", "assistant"}, {"content", reply}});
    std::lock_guard<std::mutex> l(st_.mu);
    Figures& g = st_.v.fig;
    g.prefill_tps = s.prefill_s > 0 ? s.n_prompt / s.prefill_s : 0;
    g.prefill_tokens = s.n_prompt;
    g.prefill_was_reprefill = false;
    g.decode_tps = s.decode_s > 0 && s.n_decode_tokens > 0 ? s.n_decode_tokens / s.decode_s : 0;
    g.decode_tokens = s.n_generated;
    g.cached_tokens = s.n_cached;
    g.spec_proposed = s.spec.n_proposed;
    g.spec_accepted = s.spec.n_accepted;
    if (pieces == 0) g.ttft_s = now_s() - t0;
    if (g.decode_tps > 0) {
      g.history.push_back(g.decode_tps);
      if (g.history.size() > 24) g.history.erase(g.history.begin());
    }
    Form& f = st_.v.forms[st_.v.form];
    f.prefill_tps = g.prefill_tps;
    f.decode_tps = g.decode_tps;
    memory_figures();
    if (s.stop == "stopped") st_.v.status = "reply stopped (Esc)";
    else if (s.stop == "length") st_.v.status = "reply cut at --max-tokens " + std::to_string(go.max_tokens);
    else if (s.stop == "context") st_.v.status = "reply cut: the context is full";
    if (reply.empty()) st_.v.conversation.back().text = "(no text)";
    st_.v.generating = false;
    ++st_.v.version;
  }

  // Evaluates the conversation so far on the new backend, so that the next
  // turn reuses it. Returns the note for the status line ("" for none).
  std::string reprefill() {
    if (turns_.empty()) return "";
    std::vector<int32_t> ids;
    try {
      ids = tokens(false);
    } catch (const Error& e) {
      return std::string("; not re-prefilled: ") + e.what();
    }
    if (ids.empty() || static_cast<int32_t>(ids.size()) >= n_ctx_) return "; not re-prefilled (longer than the context)";
    const double t0 = now_s();
    try {
      (void)prefill(*session_, ids, 0, 512);
    } catch (const Error& e) {
      held_.clear();
      session_->truncate(0, 0);
      return std::string("; re-prefill failed: ") + e.what();
    }
    const double secs = now_s() - t0;
    held_ = ids;
    for (int32_t t : ids) sampler_->accept(t);
    std::lock_guard<std::mutex> l(st_.mu);
    Figures& g = st_.v.fig;
    g.prefill_tps = secs > 0 ? ids.size() / secs : 0;
    g.prefill_tokens = static_cast<int32_t>(ids.size());
    g.prefill_was_reprefill = true;
    memory_figures();
    return "; re-prefilled " + std::to_string(ids.size()) + " tokens at " + tps(g.prefill_tps) + " tok/s";
  }

  TuiOptions o_;
  TuiState& st_;
  std::atomic<bool>& stop_;
  LoadedModel m_;
  std::optional<ChatPrompt> prompt_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<Speculation> spec_;  ///< null without --spec-ngram / --model-draft
  std::unique_ptr<Sampler> sampler_;
  SamplerParams sp_;
  int32_t n_ctx_ = 0;
  std::string system_;
  json turns_ = json::array();
  std::vector<int32_t> held_;
};

Worker::Worker(const TuiOptions& o, std::vector<Form> forms, int form, LoadedModel model) {
  state_.v.forms = std::move(forms);
  state_.v.system = o.system;
  engine_ = std::make_unique<Engine>(o, state_, stop_, std::move(model), form);
  thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> l(qmu_);
    quit_ = true;
    queue_.clear();
  }
  qcv_.notify_one();
  thread_.join();
}

void Worker::loop() {
  for (;;) {
    std::function<void(Engine&)> job;
    {
      std::unique_lock<std::mutex> l(qmu_);
      qcv_.wait(l, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      job(*engine_);
    } catch (const std::exception& e) {
      // A job's own errors land in the state; this is the last net (e.g.
      // out of memory while loading) so that the screen keeps working.
      std::lock_guard<std::mutex> l(state_.mu);
      state_.v.error = e.what();
      state_.v.generating = false;
    }
    std::lock_guard<std::mutex> l(state_.mu);
    state_.v.busy.clear();
    ++state_.v.version;
  }
}

void Worker::post(std::function<void(Engine&)> job, const std::string& busy) {
  {
    std::lock_guard<std::mutex> l(state_.mu);
    state_.v.busy = busy;
    state_.v.error.clear();
    state_.v.status.clear();
    state_.v.log.clear();
    ++state_.v.version;
  }
  {
    std::lock_guard<std::mutex> l(qmu_);
    queue_.push_back(std::move(job));
  }
  qcv_.notify_one();
}

namespace {
// Under s.mu: false (and the error set) when the worker is busy.
bool idle_or_say(View& v, const char* what) {
  if (v.busy.empty()) return true;
  v.error = std::string("busy (") + v.busy + "): " + what + " when it is done" +
            (v.generating ? "; Esc stops the reply" : "");
  ++v.version;
  return false;
}
}  // namespace

bool Worker::send(const std::string& text) {
  {
    std::lock_guard<std::mutex> l(state_.mu);
    if (!idle_or_say(state_.v, "send")) return false;
  }
  stop_.store(false);
  post([text](Engine& e) { e.turn(text); }, "generating");
  return true;
}

void Worker::stop() { stop_.store(true); }

void Worker::next_form() {
  int next = -1;
  std::string label;
  {
    std::lock_guard<std::mutex> l(state_.mu);
    View& v = state_.v;
    if (!idle_or_say(v, "switch forms")) return;
    const int n = static_cast<int>(v.forms.size());
    for (int k = 1; k < n && next < 0; ++k) {
      const int i = (v.form + k) % n;
      if (v.forms[i].why_not.empty()) next = i;
    }
    if (next < 0) {
      v.error = "no other form can run here (the forms table says why)";
      ++v.version;
      return;
    }
    label = v.forms[next].label;
  }
  post([next](Engine& e) { e.switch_to(next); }, "loading " + label);
}

void Worker::reset() {
  {
    std::lock_guard<std::mutex> l(state_.mu);
    if (!idle_or_say(state_.v, "reset")) return;
  }
  post([](Engine& e) { e.reset(); }, "resetting");
}

void Worker::set_system(const std::string& text) {
  {
    std::lock_guard<std::mutex> l(state_.mu);
    if (!idle_or_say(state_.v, "set the system prompt")) return;
  }
  post([text](Engine& e) { e.set_system(text); }, "setting the system prompt");
}

}  // namespace kvad::cli::tui
