// `kvad tui`: a full-screen terminal UI (ncurses) for one conversation,
// with live figures and `p` cycling the backend and weight format (tui.h).
//
// This file is the key loop. The input line has two modes: "keys", where
// p r s q act (the line is empty, or holds a draft shown dimmed), and
// "message" (or "system"), where every key types. A printable key other
// than those four starts a message with itself, so typing needs no extra
// key; `i` or Enter opens an empty line for a message that begins with one
// of them. The model runs on the Worker's thread; this loop polls keys
// every 50 ms and redraws when the worker's state changes.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <ncurses.h>
#include <unistd.h>

#include <atomic>
#include <clocale>
#include <csignal>
#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_store.h"
#include "cli/tui.h"
#include "model/model.h"

namespace kvad::cli {

namespace {

using namespace tui;

std::atomic<bool> g_quit{false};
void on_term(int) { g_quit.store(true); }

// While the screen is up, what kvad writes to stderr (load notes, the
// quantize-once cache's lines) goes through a pipe into the state's log,
// where the status line shows the latest; written to stderr itself would
// tear the screen.
class StderrCapture {
 public:
  explicit StderrCapture(TuiState& st) : st_(st) {
    int fds[2];
    if (pipe(fds) != 0) return;
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    read_fd_ = fds[0];
    thread_ = std::thread([this] { pump(); });
  }
  ~StderrCapture() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);  // closes the pipe's last write end: pump() sees EOF
    close(saved_);
    thread_.join();
    close(read_fd_);
  }

 private:
  void pump() {
    std::string line;
    char buf[512];
    for (;;) {
      const ssize_t n = read(read_fd_, buf, sizeof buf);
      if (n <= 0) return;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] != '\n' && buf[i] != '\r') {
          line += buf[i];
          continue;
        }
        if (line.empty()) continue;
        std::lock_guard<std::mutex> l(st_.mu);
        st_.v.log = line;
        ++st_.v.version;
        line.clear();
      }
    }
  }
  TuiState& st_;
  int saved_ = -1, read_fd_ = -1;
  std::thread thread_;
};

// ncurses on the terminal for as long as it lives; endwin() on every way out.
class Screen {
 public:
  Screen() {
    term_ = newterm(nullptr, stdout, stdin);
    if (!term_) {
      const char* t = std::getenv("TERM");
      throw Error(std::string("kvad tui cannot drive this terminal (TERM=") + (t ? t : "unset") +
                  "); try TERM=xterm or TERM=vt100");
    }
    set_term(term_);
    raw();  // Ctrl-C, Ctrl-S and Ctrl-Q arrive as keys
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    timeout(50);
    init_style();
  }
  ~Screen() {
    endwin();
    delscreen(term_);
  }

 private:
  SCREEN* term_ = nullptr;
};

class InputLine {
 public:
  InputView view;

  bool empty() const { return view.text.empty(); }
  void insert(char32_t c) { view.text.insert(view.cursor++, 1, c); }
  void set(const std::u32string& s) { view.text = s, view.cursor = s.size(); }
  std::string take() {
    std::string s = to_utf8(view.text);
    set(U"");
    return s;
  }

  // Edits for one key; false when the key is not an editing key.
  bool edit(int key) {
    std::u32string& t = view.text;
    size_t& c = view.cursor;
    switch (key) {
      case KEY_BACKSPACE: case 127: case 8:
        if (c > 0) t.erase(--c, 1);
        return true;
      case KEY_DC: case 4:
        if (c < t.size()) t.erase(c, 1);
        return true;
      case KEY_LEFT: if (c > 0) --c; return true;
      case KEY_RIGHT: if (c < t.size()) ++c; return true;
      case KEY_HOME: case 1: c = 0; return true;
      case KEY_END: case 5: c = t.size(); return true;
      case 21: t.erase(0, c), c = 0; return true;   // Ctrl-U
      case 11: t.erase(c); return true;             // Ctrl-K
      case 23: {                                    // Ctrl-W: the word before the cursor
        size_t b = c;
        while (b > 0 && t[b - 1] == U' ') --b;
        while (b > 0 && t[b - 1] != U' ') --b;
        t.erase(b, c - b), c = b;
        return true;
      }
      default: return false;
    }
  }

  // Up/Down through the sent messages; the line being written is kept as
  // the newest entry while browsing.
  void history(int dir) {
    if (hist_.empty()) return;
    if (pos_ == hist_.size()) draft_ = view.text;
    if (dir < 0 && pos_ > 0) --pos_;
    else if (dir > 0 && pos_ < hist_.size()) ++pos_;
    set(pos_ == hist_.size() ? draft_ : hist_[pos_]);
  }
  void remember(const std::u32string& s) {
    if (!s.empty() && (hist_.empty() || hist_.back() != s)) hist_.push_back(s);
    pos_ = hist_.size();
  }

 private:
  std::vector<std::u32string> hist_;
  size_t pos_ = 0;
  std::u32string draft_;
};

void tui_main(const TuiOptions& o) {
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
    throw Error("kvad tui needs a terminal on stdin and stdout (kvad chat reads a pipe)");
  // The form --device/--quant ask for, then the model in it (before the
  // screen starts, so that a bad --model is an ordinary one-line error).
  const ResolvedModel resolved = resolve_model_full(o.model);
  const bool checkpoint = resolved.checkpoint;
  const std::vector<Form> asked = make_forms(checkpoint, "", o.device.dtype);
  int form = form_index(asked, o.device);
  if (form < 0)
    throw Error("kvad tui runs --device cpu or cuda with --quant none, q8_0 or q4_0 (asked: --device " +
                o.device.device + " --quant " + (o.device.quant.empty() ? "none" : o.device.quant) + ")");
  o.cache_type.types();  // a bad --cache-type-k/-v fails before the model loads
  std::fprintf(stderr, "kvad tui: loading %s ...\n", o.model.empty() ? kDefaultModel : o.model.c_str());
  LoadedModel m = load_for_cli(resolved, asked[form].device);
  std::vector<Form> forms = make_forms(checkpoint, m.model->hparams().arch, o.device.dtype);
  Worker worker(o, std::move(forms), form, std::move(m));
  TuiState& st = worker.state();

  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);

  std::setlocale(LC_ALL, "");  // ncurses draws UTF-8 only when the locale says so
  StderrCapture capture(st);
  Screen screen;
  InputLine in;
  std::u32string draft;  // the message line, kept while the system prompt is edited
  int scroll = 0;
  uint64_t drawn = ~0ull;
  bool dirty = true;
  while (!g_quit.load()) {
    View v;
    {
      std::lock_guard<std::mutex> l(st.mu);
      if (dirty || st.v.version != drawn) v = st.v, drawn = st.v.version, dirty = true;
    }
    if (dirty) {
      draw(v, in.view, scroll);
      dirty = false;
    }
    wint_t ch = 0;
    const int r = get_wch(&ch);
    if (r == ERR) continue;
    dirty = true;
    const int key = static_cast<int>(ch);
    const bool fkey = r == KEY_CODE_YES;
    if (fkey && key == KEY_RESIZE) continue;
    const int page = std::max(1, LINES - 6);
    if (fkey && key == KEY_PPAGE) { scroll += page; continue; }
    if (fkey && key == KEY_NPAGE) { scroll = std::max(0, scroll - page); continue; }
    if (!fkey && key == 3) break;  // Ctrl-C quits from any mode
    const bool enter = (!fkey && (key == '\r' || key == '\n')) || (fkey && key == KEY_ENTER);
    std::string& mode = in.view.mode;
    if (!fkey && key == 27) {  // Esc: stop the reply, else leave the line
      bool gen;
      {
        std::lock_guard<std::mutex> l(st.mu);
        gen = st.v.generating;
        st.v.error.clear();
      }
      if (gen) worker.stop();
      else if (mode == "system") mode = "keys", in.set(draft);
      else if (mode == "message") mode = "keys";
      continue;
    }
    if (mode == "keys") {
      if (!fkey && key == 'q') break;
      if (!fkey && key == 'p') { worker.next_form(); continue; }
      if (!fkey && key == 'r') { worker.reset(); scroll = 0; continue; }
      if (!fkey && key == 's') {
        draft = in.view.text;
        std::lock_guard<std::mutex> l(st.mu);
        in.set(to_u32(st.v.system));
        mode = "system";
        continue;
      }
      if (fkey && key == KEY_UP) { ++scroll; continue; }
      if (fkey && key == KEY_DOWN) { scroll = std::max(0, scroll - 1); continue; }
      if (enter || (!fkey && (key == 'i' || key == '\t'))) { mode = "message"; continue; }
      if (!fkey && key >= 0x20 && key != 0x7f) {
        mode = "message";
        in.insert(static_cast<char32_t>(key));
      }
      continue;
    }
    // "message" or "system": every key edits the line.
    if (enter) {
      if (mode == "system") {
        worker.set_system(in.take());
        in.set(draft);
        mode = "keys";
        scroll = 0;
      } else if (in.empty()) {
        mode = "keys";
      } else if (worker.send(to_utf8(in.view.text))) {
        in.remember(in.view.text);
        in.set(U"");
        mode = "keys";
        scroll = 0;
      }
      continue;
    }
    if (fkey && (key == KEY_UP || key == KEY_DOWN)) {
      if (mode == "message") in.history(key == KEY_UP ? -1 : 1);
      continue;
    }
    if (fkey || key < 0x20 || key == 0x7f) (void)in.edit(key);
    else in.insert(static_cast<char32_t>(key));
  }
  // Leaving: stop a reply in flight; ~Worker finishes the running command.
  worker.stop();
}

}  // namespace

void add_tui(CLI::App& app) {
  auto o = std::make_shared<TuiOptions>();
  CLI::App* c = app.add_subcommand(
      "tui", "Full-screen chat with live figures (speed, cache reuse, memory); p cycles backends and weight formats");
  c->add_option("-s,--system", o->system, "System prompt");
  o->add_to(c, "Most tokens per reply (-1: until the model stops)");
  o->spec.add_to(c);
  c->callback([o] {
    o->spec.check();
    tui_main(*o);
  });
}

}  // namespace kvad::cli
