// `kvad tui`'s screen: draws one View with ncurses, nothing else (tui.h).
//
// Everything is drawn on stdscr from the terminal's size at the time, so a
// resize needs no bookkeeping: the next draw lays the screen out anew.
// Without colours (NO_COLOR, or a terminal such as vt100 that has none) the
// same screen uses bold, reverse and dim; without a UTF-8 locale it draws
// ASCII only.
#include <langinfo.h>
#include <ncurses.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cwchar>
#include <map>

#include "base/utf8.h"
#include "cli/tui.h"

#include "cli/download_progress.h"  // human_bytes

namespace kvad::cli::tui {

namespace {

bool g_color = false;
bool g_utf8 = false;

enum Pair : short { kUser = 1, kAssistant, kCode, kError, kTitle, kNote };

attr_t style(Pair p) {
  if (g_color) return COLOR_PAIR(p) | (p == kUser || p == kAssistant || p == kTitle ? A_BOLD : A_NORMAL);
  switch (p) {
    case kUser: case kAssistant: case kTitle: case kError: return A_BOLD;
    case kNote: return A_DIM;
    default: return A_NORMAL;
  }
}

// Columns a code point takes (0 for combining marks, 2 for wide ones).
int cols_of(char32_t c) {
  if (!g_utf8) return 1;
  const int w = wcwidth(static_cast<wchar_t>(c));
  return w < 0 ? 1 : w;
}

// What can be drawn: printable, and ASCII only outside a UTF-8 locale.
char32_t drawable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return U' ';
  if (!g_utf8 && c > 0x7e) return U'?';
  if (g_utf8 && wcwidth(static_cast<wchar_t>(c)) < 0) return U'\uFFFD';
  return c;
}

int width_of(const std::u32string& s) {
  int w = 0;
  for (char32_t c : s) w += cols_of(drawable(c));
  return w;
}

// Draws `s` at (y, x) in at most `w` columns.
void put(int y, int x, int w, const std::u32string& s, attr_t a = A_NORMAL) {
  if (w <= 0 || y < 0 || y >= LINES || x >= COLS) return;
  std::wstring out;
  int used = 0;
  for (char32_t c : s) {
    c = drawable(c);
    const int cw = cols_of(c);
    if (used + cw > w) break;
    out += static_cast<wchar_t>(c);
    used += cw;
  }
  attron(a);
  mvaddnwstr(y, x, out.c_str(), static_cast<int>(out.size()));
  attroff(a);
}
void put(int y, int x, int w, const std::string& s, attr_t a = A_NORMAL) { put(y, x, w, to_u32(s), a); }

void hline_at(int y, int x, int w) {
  if (w > 0 && y >= 0 && y < LINES) mvhline(y, x, ACS_HLINE, w);
}

// One screen line of the conversation.
enum class Kind { User, Assistant, Body, Code, FenceOpen, FenceClose, Note, Blank };
struct Line {
  Kind kind;
  std::u32string text;
};

// Word-wraps one paragraph (no newlines) to `w` columns; a word longer
// than a line is cut.
void wrap_into(const std::u32string& para, int w, Kind kind, std::vector<Line>& out) {
  if (w < 1) w = 1;
  if (para.empty()) {
    out.push_back({kind, U""});
    return;
  }
  size_t i = 0;
  while (i < para.size()) {
    int used = 0;
    size_t j = i, last_space = std::u32string::npos;
    while (j < para.size()) {
      const int cw = cols_of(drawable(para[j]));
      if (used + cw > w) break;
      if (para[j] == U' ') last_space = j;
      used += cw;
      ++j;
    }
    if (j < para.size() && last_space != std::u32string::npos && last_space > i && kind != Kind::Code) {
      out.push_back({kind, para.substr(i, last_space - i)});
      i = last_space + 1;
    } else {
      if (j == i) ++j;  // a character wider than the line
      out.push_back({kind, para.substr(i, j - i)});
      i = j;
    }
  }
}

// The conversation as screen lines `w` columns wide: a label line per
// message, its text wrapped below it, fenced code blocks set apart.
std::vector<Line> layout(const View& v, int w) {
  std::vector<Line> out;
  if (!v.system.empty()) {
    wrap_into(to_u32("system: " + v.system), w, Kind::Note, out);
    out.push_back({Kind::Blank, U""});
  }
  for (size_t m = 0; m < v.conversation.size(); ++m) {
    const Message& msg = v.conversation[m];
    if (msg.role == "note") {
      wrap_into(to_u32("* " + msg.text), w, Kind::Note, out);
      out.push_back({Kind::Blank, U""});
      continue;
    }
    const bool user = msg.role == "user";
    out.push_back({user ? Kind::User : Kind::Assistant,
                   user ? U"you" : U"assistant" + (msg.form.empty() ? U"" : U" (" + to_u32(msg.form) + U")")});
    std::u32string text = to_u32(msg.text);
    const bool streaming = v.generating && m + 1 == v.conversation.size() && !user;
    if (streaming) text += g_utf8 ? U"\u258c" : U"_";
    bool code = false;
    size_t start = 0;
    while (start <= text.size()) {
      size_t nl = text.find(U'\n', start);
      if (nl == std::u32string::npos) nl = text.size();
      std::u32string line = text.substr(start, nl - start);
      for (size_t t; (t = line.find(U'\t')) != std::u32string::npos;) line.replace(t, 1, U"    ");
      size_t lead = line.find_first_not_of(U' ');
      if (lead != std::u32string::npos && line.compare(lead, 3, U"```") == 0) {
        out.push_back({code ? Kind::FenceClose : Kind::FenceOpen, code ? U"" : line.substr(lead + 3)});
        code = !code;
      } else if (code) {
        wrap_into(line, w - 4, Kind::Code, out);
      } else {
        wrap_into(line, w - 2, Kind::Body, out);
      }
      start = nl + 1;
    }
    if (code) out.push_back({Kind::FenceClose, U""});  // a block still streaming
    out.push_back({Kind::Blank, U""});
  }
  return out;
}

void draw_line(int y, int x, int w, const Line& l) {
  switch (l.kind) {
    case Kind::User: put(y, x, w, l.text, style(kUser)); break;
    case Kind::Assistant: put(y, x, w, l.text, style(kAssistant)); break;
    case Kind::Body: put(y, x + 2, w - 2, l.text); break;
    case Kind::Note: put(y, x, w, l.text, style(kNote)); break;
    case Kind::Code:
      mvaddch(y, x + 2, ACS_VLINE | style(kCode));
      put(y, x + 4, w - 4, l.text, style(kCode));
      break;
    case Kind::FenceOpen:
      mvaddch(y, x + 2, ACS_ULCORNER | style(kCode));
      hline_at(y, x + 3, 2);
      put(y, x + 6, w - 6, U"code " + l.text, style(kCode));
      break;
    case Kind::FenceClose:
      mvaddch(y, x + 2, ACS_LLCORNER | style(kCode));
      hline_at(y, x + 3, std::min(8, w - 3));
      break;
    case Kind::Blank: break;
  }
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::u32string sparkline(const std::vector<double>& h, size_t n) {
  static const char32_t* blocks = U"\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588";
  static const char32_t* ascii = U"._-~=+*#";
  const size_t from = h.size() > n ? h.size() - n : 0;
  double hi = 0;
  for (size_t i = from; i < h.size(); ++i) hi = std::max(hi, h[i]);
  std::u32string s;
  for (size_t i = from; i < h.size(); ++i) {
    const int lvl = hi > 0 ? std::clamp(static_cast<int>(h[i] / hi * 7.999), 0, 7) : 0;
    s += (g_utf8 ? blocks : ascii)[lvl];
  }
  return s;
}

std::u32string bar(int32_t used, int32_t size, int w) {
  if (w < 1) return U"";
  const int fill = size > 0 ? static_cast<int>(static_cast<int64_t>(used) * w / size) : 0;
  std::u32string s;
  for (int i = 0; i < w; ++i) s += i < fill ? (g_utf8 ? U'\u2588' : U'#') : (g_utf8 ? U'\u2591' : U'.');
  return s;
}

// The figures panel: rows [0, h) of columns [x, x + w).
void draw_panel(const View& v, int x, int w, int h) {
  const Figures& g = v.fig;
  int y = 0;
  auto row = [&](const std::string& key, const std::string& val, attr_t a = A_NORMAL) {
    if (y >= h) return;
    put(y, x, 14, key, style(kNote));
    put(y, x + 14, w - 14, val, a);
    ++y;
  };
  auto rule = [&](const std::string& title) {
    if (y >= h) return;
    hline_at(y, x, w);
    put(y, x + 1, w - 2, " " + title + " ", style(kTitle));
    ++y;
  };
  rule("kvad tui");
  // A long repo name keeps its end, where the model's own name is.
  std::string model = g.model;
  if (static_cast<int>(model.size()) > w - 14 && model.find('/') != std::string::npos)
    model = model.substr(model.rfind('/') + 1);
  row("model", model);
  row("arch", g.arch + (g.n_layer ? " (" + std::to_string(g.n_layer) + " layers)" : ""));
  row("form", v.forms.empty() ? "?" : v.forms[v.form].label, A_BOLD);
  row("backend", g.backend + " | " + g.weight_format);
  row("weights", human_bytes(g.weight_bytes));
  row("KV cache", human_bytes(g.kv_bytes) + " (" + human_bytes(g.kv_bytes_per_token) + "/token)");
  row("RSS", human_bytes(g.rss_bytes) + " (peak " + human_bytes(g.peak_rss_bytes) + ")");
  rule(v.generating ? "this reply" : "last reply");
  row("TTFT", g.ttft_s > 0 ? fmt("%.3f s", g.ttft_s) : "-");
  row(g.prefill_was_reprefill ? "re-prefill" : "prefill",
      g.prefill_tps > 0 ? fmt("%.1f tok/s", g.prefill_tps) + " (" + std::to_string(g.prefill_tokens) + " tok)" : "-");
  row("decode", g.decode_tps > 0 ? fmt("%.1f tok/s", g.decode_tps) + " (" + std::to_string(g.decode_tokens) + " tok)" : "-");
  if (y < h) {
    put(y, x, 14, U"replies", style(kNote));
    put(y, x + 14, w - 14, sparkline(g.history, static_cast<size_t>(std::max(1, w - 15))), style(kAssistant));
    ++y;
  }
  row("cached_tokens", g.cached_tokens < 0 ? "-" : std::to_string(g.cached_tokens));
  if (!g.spec.empty())
    row("speculation", g.spec + ": " +
                           (g.spec_proposed > 0 ? std::to_string(g.spec_accepted) + "/" + std::to_string(g.spec_proposed) +
                                                      fmt(" accepted (%.0f%%)", 100.0 * g.spec_accepted / g.spec_proposed)
                                                : std::string("-")));
  row("context", std::to_string(g.ctx_used) + " / " + std::to_string(g.n_ctx) + " tokens");
  if (y < h) {
    put(y, x + 14, w - 14, bar(g.ctx_used, g.n_ctx, w - 15), style(kCode));
    ++y;
  }
  rule("forms (p: next)");
  if (y < h) {
    put(y, x + 2, w - 2, U"              prefill  decode", style(kNote));
    ++y;
  }
  std::map<std::string, std::string> why;  // reason -> the forms it greys
  for (size_t i = 0; i < v.forms.size() && y < h; ++i, ++y) {
    const Form& f = v.forms[i];
    const bool cur = static_cast<int>(i) == v.form;
    put(y, x, 2, cur ? U">" : U" ", A_BOLD);
    char label[20];
    std::snprintf(label, sizeof label, "%-13s", f.label.c_str());
    if (!f.why_not.empty()) {
      put(y, x + 2, w - 2, std::string(label) + "      -       -  n/a", style(kNote));
      why[f.why_not] += (why[f.why_not].empty() ? "" : ", ") + f.label;
    } else {
      std::string nums = f.decode_tps > 0 ? fmt("%7.1f", f.prefill_tps) + fmt("%8.1f", f.decode_tps) : "      -       -";
      put(y, x + 2, w - 2, std::string(label) + nums, cur ? A_BOLD | A_REVERSE : A_NORMAL);
    }
  }
  std::vector<Line> lines;
  for (const auto& [reason, which] : why) wrap_into(to_u32(which + ": " + reason), w - 1, Kind::Note, lines);
  for (const Line& l : lines) {
    if (y >= h) break;
    put(y++, x + 1, w - 1, l.text, style(kNote));
  }
}

}  // namespace

void init_style() {
  const char* cs = nl_langinfo(CODESET);
  g_utf8 = cs && (std::strcmp(cs, "UTF-8") == 0 || std::strcmp(cs, "utf8") == 0);
  const char* nc = std::getenv("NO_COLOR");
  g_color = has_colors() && !(nc && *nc);
  if (!g_color) return;
  start_color();
  use_default_colors();
  init_pair(kUser, COLOR_CYAN, -1);
  init_pair(kAssistant, COLOR_GREEN, -1);
  init_pair(kCode, COLOR_YELLOW, -1);
  init_pair(kError, COLOR_RED, -1);
  init_pair(kTitle, COLOR_MAGENTA, -1);
  init_pair(kNote, COLOR_BLUE, -1);
}

void draw(const View& v, const InputView& in, int& scroll) {
  erase();
  const int H = LINES, W = COLS;
  if (H < 6 || W < 30) {
    std::vector<Line> l;
    wrap_into(to_u32("kvad tui: the terminal is too small (" + std::to_string(W) + "x" + std::to_string(H) +
                     "; 30x6 at least); q quits"), W, Kind::Note, l);
    for (int y = 0; y < H && y < static_cast<int>(l.size()); ++y) put(y, 0, W, l[y].text);
    refresh();
    return;
  }
  const int panel = W >= 90 ? 42 : 0;
  const int conv_w = W - panel - (panel ? 1 : 0);
  int top = 0;
  if (!panel) {
    // Narrow: one line of figures above the conversation instead of the panel.
    const Figures& g = v.fig;
    attron(A_REVERSE);
    mvhline(0, 0, ' ', W);
    attroff(A_REVERSE);
    put(0, 0, W, " " + (v.forms.empty() ? "" : v.forms[v.form].label) + " | decode " + fmt("%.1f", g.decode_tps) +
                     " tok/s | cached_tokens " + std::to_string(std::max(0, g.cached_tokens)) + " | ctx " +
                     std::to_string(g.ctx_used) + "/" + std::to_string(g.n_ctx) + " | widen for all figures",
        A_REVERSE);
    top = 1;
  }
  const int conv_h = H - 3 - top;
  // The conversation, scrolled `scroll` lines back from its end.
  const std::vector<Line> lines = layout(v, conv_w - 1);
  const int total = static_cast<int>(lines.size());
  // Scrolled back, the view stays on the lines it shows while a reply grows
  // below them (the UI thread is the only caller).
  static int prev_total = 0;
  if (scroll > 0 && total > prev_total) scroll += total - prev_total;
  prev_total = total;
  scroll = std::clamp(scroll, 0, std::max(0, total - conv_h));
  const int first = std::max(0, total - conv_h - scroll);
  for (int r = 0; r < conv_h && first + r < total; ++r) draw_line(top + r, 0, conv_w - 1, lines[first + r]);
  if (total == 0)
    put(top, 0, conv_w, "Type a message and press Enter. The figures on the right update as the model replies.",
        style(kNote));
  if (scroll > 0) put(top, conv_w - 12, 12, " [" + std::to_string(scroll) + " up] ", A_REVERSE);
  if (panel) {
    mvvline(0, conv_w, ACS_VLINE, H - 3);
    draw_panel(v, conv_w + 1, panel, H - 3);
  }
  // Status: an error first, then what the worker is doing, then the last note.
  const int ys = H - 3;
  hline_at(ys, 0, W);
  if (!v.error.empty()) put(ys, 1, W - 2, " error: " + v.error + " ", style(kError) | A_BOLD);
  else if (!v.busy.empty()) put(ys, 1, W - 2, " " + v.busy + (v.generating ? " (Esc stops)" : "") + " ... ", A_BOLD);
  else if (!v.status.empty()) put(ys, 1, W - 2, " " + v.status + " ", A_NORMAL);
  else if (!v.log.empty()) put(ys, 1, W - 2, " " + v.log + " ", style(kNote));
  // The input line, scrolled sideways so that the cursor stays on screen.
  const int yi = H - 2;
  const std::string prompt = in.mode == "system" ? "system> " : in.mode == "message" ? "> " : "keys> ";
  put(yi, 0, W, prompt, A_BOLD);
  const int px = static_cast<int>(prompt.size());
  const int iw = W - px - 1;
  if (in.mode == "keys" && in.text.empty()) {
    put(yi, px, iw, "type a message; p r s q are keys here (i or Enter first to begin with them)", style(kNote));
  } else {
    const std::u32string before = in.text.substr(0, in.cursor);
    size_t from = 0;
    while (from < before.size() && width_of(before.substr(from)) > iw - 1) ++from;
    put(yi, px, iw, in.text.substr(from), in.mode == "keys" ? style(kNote) : A_NORMAL);
    move(yi, px + width_of(before.substr(from)));
  }
  // Footer: the keys of the mode the input line is in.
  const bool wide = W >= 100;
  const char* keys = in.mode == "keys"
                         ? (wide ? " Enter send | Esc stop the reply | p next form | r reset | s system prompt | q quit | "
                                   "PgUp/PgDn scroll "
                                 : " Enter send|Esc stop|p form|r reset|s system|q quit|PgUp/PgDn")
                         : (wide ? " Enter send | Esc stop the reply / leave the line | Up/Down history | PgUp/PgDn scroll "
                                 : " Enter send|Esc stop/leave|Up/Down history|PgUp/PgDn");
  attron(A_REVERSE);
  mvhline(H - 1, 0, ' ', W);
  attroff(A_REVERSE);
  put(H - 1, 0, W, std::string(keys), A_REVERSE);
  if (in.mode == "keys" && in.text.empty()) move(yi, px);
  refresh();
}

std::u32string to_u32(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out += static_cast<char32_t>(utf8::decode(s, i));
  return out;
}

std::string to_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) utf8::append(out, static_cast<uint32_t>(c));
  return out;
}

}  // namespace kvad::cli::tui
